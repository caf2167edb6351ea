"""Prepare and unprepare through the real kubelet: CDI specs per claim, the CDI devices the kubelet hands
the runtime, unprepare on pod deletion, and the plugin's recovery after a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from driver import names
from driver.plugin.state.checkpoint import Checkpoint
from e2e import kube
from e2e.cluster.versions import REPO

N1 = "e2e-n1"


def _edits(spec: dict, key: str) -> list:
    """One kind of container edit of a CDI spec: the spec's own and every device's."""
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec["devices"]]
    return [x for e in edits for x in e.get(key) or []]


def _spec_file(node, uid: str) -> str:
    return f"k8s.{names.DRIVER_NAME}-claim_{uid}.json"


def _run(api, ns, name, requests):
    kube.create(api, ns, kube.template(name, requests))
    kube.create(api, ns, kube.pod(name, claim_template=name, node=N1))
    kube.wait_running(api, ns, name)
    return kube.claim_of(api, ns, name)


def test_prepare_writes_cdi_and_the_kubelet_passes_it_to_the_runtime(cluster, api, namespace, gates_on):
    node = cluster.nodes[N1]
    claim = _run(api, namespace, "prep", kube.soft_or_slot(gates_on))
    uid = claim["metadata"]["uid"]
    specs = node.cdi_specs()
    spec = specs.get(_spec_file(node, uid))
    assert spec, f"no CDI spec for claim {uid} in {node.cdi_dir}: {list(specs)}"
    env = _edits(spec, "env")
    assert any(e.startswith("CARVE_MEMORY_LIMIT_0=") for e in env), env
    mounts = {m["containerPath"]: m["hostPath"] for m in _edits(spec, "mounts")}
    assert mounts.get(names.LIMITER_CONTAINER_PATH) == str(
        REPO / "native" / "build" / names.LIMITER_LIBRARY
    ), mounts
    # The limiter gets into the container's /etc/ld.so.preload through carve's createContainer hook.
    hooks = [h for h in _edits(spec, "hooks") if h.get("hookName") == "createContainer"]
    assert any("preload" in h.get("args", []) and names.LIMITER_CONTAINER_PATH in h["args"] for h in hooks), (
        hooks
    )
    # The fake driver's libcuda.so.1 from the node's driver root, as a real driver's would be.
    cuda = [c for c, h in mounts.items() if "libcuda.so" in c and h.startswith(str(node.driver_root))]
    assert cuda, mounts
    created = [c for c in node.created_containers() if c["namespace"] == namespace and c["pod"] == "prep"]
    assert created, "the kubelet created no container for the pod"
    kind = spec["kind"]
    wanted = {f"{kind}={d['name']}" for d in spec["devices"]}
    assert wanted <= set(created[0]["cdiDevices"] or []), (wanted, created[0])
    # Deleting the pod unprepares: the kubelet calls NodeUnprepareResources, the spec goes.
    kube.delete_pod(api, namespace, "prep")
    kube.wait(f"CDI spec of claim {uid} removed", lambda: _spec_file(node, uid) not in node.cdi_specs())


def test_whole_gpu_claim_gets_its_device_node(cluster, api, namespace):
    node = cluster.nodes[N1]
    claim = _run(api, namespace, "whole", [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}}])
    spec = node.cdi_specs()[_spec_file(node, claim["metadata"]["uid"])]
    paths = [n["path"] for n in _edits(spec, "deviceNodes")]
    assert any(p.startswith("/dev/nvidia") and p[len("/dev/nvidia") :].isdigit() for p in paths), paths


def _mig_instances(node) -> dict[str, dict]:
    """The MIG instances of the node's fake GPUs by UUID, as NVML reports them: `carve inspect` on the fake
    GPU state the node's plugin keeps (CARVE_FAKE_STATE, <plugin-dir>/fake-gpus.state)."""
    env = {**os.environ, names.ENV_FAKE_STATE: str(node.plugin_dir / "fake-gpus.state")}
    argv = [str(Path(sys.executable).parent / "carve"), "inspect", "-o", "json"]
    argv += ["--gpus", node.spec.gpus, "--node-name", node.name]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"
    return {i["uuid"]: i for g in json.loads(done.stdout)["gpus"] for i in g.get("mig_instances") or []}


def test_deleting_a_mig_pod_destroys_its_instance(cluster, api, namespace, gates_on):
    if not gates_on:
        pytest.skip("MIG devices need DRAPartitionableDevices, off in this run (GATES=off)")
    node = cluster.nodes[N1]
    before = _mig_instances(node)
    mig = kube.mig_profile("1g.10gb")
    uid = _run(api, namespace, "mig", mig)["metadata"]["uid"]
    # Prepare created the instance in the GPU's (fake NVML) state, not only in the CDI spec.
    created = {u: i for u, i in _mig_instances(node).items() if u not in before}
    assert [i["profile_name"] for i in created.values()] == ["1g.10gb"], (created, before)
    (instance,) = created
    kube.delete_pod(api, namespace, "mig")
    kube.wait(f"CDI spec of claim {uid} removed", lambda: _spec_file(node, uid) not in node.cdi_specs())
    kube.wait(
        f"MIG instance {instance} destroyed in {node.name}'s fake GPU state",
        lambda: instance not in _mig_instances(node),
    )


def test_restart_keeps_prepared_claims_and_cleans_up_deleted_ones(cluster, api, namespace, gates_on):
    node = cluster.nodes[N1]
    before = sorted(
        (s["metadata"]["name"], json.dumps(s["spec"].get("devices"), sort_keys=True))
        for s in cluster.slices(N1)
    )
    kept = _run(api, namespace, "kept", kube.soft_or_slot(gates_on))["metadata"]["uid"]
    gone = _run(api, namespace, "gone", kube.soft_or_slot(gates_on))["metadata"]["uid"]
    # Crash: SIGKILL with two claims prepared, restart with the same state.
    node.restart_plugin(kill=True)
    kube.wait("the plugin's health after restart", lambda: (node.plugin_dir / "dra.sock").exists())
    assert {_spec_file(node, kept), _spec_file(node, gone)} <= set(node.cdi_specs())
    # The checkpoint as the plugin reads it: its snapshot and the log of changes since (docs/plugin.md).
    checkpoint = Checkpoint(node.plugin_dir / names.CHECKPOINT_FILE, "").load(move_aside=False).claims
    assert {kept, gone} <= set(checkpoint), sorted(checkpoint)
    # The restarted plugin republishes slice by slice: wait for as many slices as before, then compare.
    cluster.wait_slices(node)

    def whole_pool():
        slices = cluster.slices(N1)
        return slices if len(slices) >= len(before) else None

    republished = kube.wait("the restarted plugin's whole pool", whole_pool)
    after = sorted(
        (s["metadata"]["name"], json.dumps(s["spec"].get("devices"), sort_keys=True)) for s in republished
    )
    assert [d for _, d in after] == [d for _, d in before], "the restarted plugin republished another pool"
    # Down while a pod goes: the kubelet retries the unprepare until the plugin is back.
    node.plugin.stop()
    from kubernetes import client

    client.CoreV1Api(api).delete_namespaced_pod("gone", namespace)
    node.restart_plugin(kill=False)
    kube.wait(
        f"CDI spec of the claim deleted while the plugin was down ({gone}) removed",
        lambda: _spec_file(node, gone) not in node.cdi_specs(),
        timeout_s=120,
    )
    assert _spec_file(node, kept) in node.cdi_specs()
    assert kube.wait_running(api, namespace, "kept")
