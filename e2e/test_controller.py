"""The strategy controller end to end (issue 8, docs/controller.md): a node whose GPUs are all soft and idle,
a pod whose claim asks for a MIG 3g.40gb instance that no GPU of the cluster can give -> `carve controller`
(a host process with the chart's controller ServiceAccount token) switches one GPU to MIG in the node's
NodePartitioning, the node's plugin switches the (fake) GPU's MIG mode, republishes its pool and writes
the status, and the real kube-scheduler places the pod. Once the pod is gone the GPU goes back to soft
(consolidation)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kubernetes import client

from e2e import kube
from e2e.cluster.controller import GROUP, VERSION, StrategyController
from e2e.cluster.versions import REPO

N1 = "e2e-n1"  # holds the session's only MIG GPU (0)
MIG_3G = [
    {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "mig.carve.dev",
            "selectors": [{"cel": {"expression": 'device.attributes["gpu.carve.dev"].profile == "3g.40gb"'}}],
        },
    }
]
MIG_7G = [
    {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "mig.carve.dev",
            "selectors": [{"cel": {"expression": 'device.attributes["gpu.carve.dev"].profile == "7g.80gb"'}}],
        },
    }
]


@pytest.fixture(scope="module")
def strategy(cluster, gates_on):
    if not gates_on:
        pytest.skip("MIG devices need DRAPartitionableDevices (gates off here): nothing to switch to")
    sc = StrategyController(cluster).start()
    yield sc
    sc.stop()


def _pool(cluster, node: str) -> tuple[int, list[str]]:
    """The newest generation of the node's pool and the names of its devices."""
    slices = cluster.slices(node)
    gen = max(s["spec"]["pool"]["generation"] for s in slices)
    devices = [
        d["name"]
        for s in slices
        if s["spec"]["pool"]["generation"] == gen
        for d in s["spec"].get("devices") or []
    ]
    return gen, devices


def _partitioning(api, node: str) -> dict | None:
    try:
        return client.CustomObjectsApi(api).get_cluster_custom_object(
            GROUP, VERSION, "nodepartitionings", node
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def _fake_mig_modes(sc: StrategyController) -> list[int]:
    """Each GPU's current MIG mode as the fake NVML of the node's plugin holds it (its shared state file)."""
    assert sc.node
    code = (
        "import pynvml; from driver.gpu import nvml; nvml.load(sys.argv[1], sys.argv[2]); "
        "print(json.dumps([pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(i))[0] "
        "for i in range(pynvml.nvmlDeviceGetCount())]))"
    )
    env = {**os.environ, "CARVE_FAKE_STATE": str(sc.node.plugin_dir / "fake-gpus.state")}
    done = subprocess.run(
        [sys.executable, "-c", "import sys, json; " + code, sc.spec.gpus, sc.name],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def _events(api, namespace: str, kind: str, name: str) -> list:
    return [
        e
        for e in client.CoreV1Api(api).list_namespaced_event(namespace).items
        if e.involved_object.kind == kind and e.involved_object.name == name
    ]


def test_controller_switches_an_idle_soft_gpu_to_mig_for_a_pending_claim(cluster, api, namespace, strategy):
    sc = strategy
    node = sc.name
    gen0, devices0 = _pool(cluster, node)
    assert devices0 and not [d for d in devices0 if "mig" in d], devices0  # all soft
    assert _fake_mig_modes(sc) == [0, 0]
    assert _partitioning(api, node) is None  # nothing asked of the node yet

    # The cluster's only MIG GPU (e2e-n1's GPU 0) is taken whole: a 3g.40gb instance fits nowhere as is.
    kube.create(api, namespace, kube.template("hold", MIG_7G))
    kube.create(api, namespace, kube.pod("hold", claim_template="hold"))
    assert kube.wait_outcome(api, namespace, "hold") == ("scheduled", N1)

    kube.create(api, namespace, kube.template("llm", MIG_3G))
    kube.create(api, namespace, kube.pod("llm", claim_template="llm"))
    claim_name = kube.wait(
        "the claim made from llm's template",
        lambda: (
            client.CoreV1Api(api).read_namespaced_pod("llm", namespace).status.resource_claim_statuses
            or [None]
        )[0],
    ).resource_claim_name

    # The controller writes the node's NodePartitioning: one GPU to mig, the other kept soft.
    def switched():
        np = _partitioning(api, node)
        gpus = (np or {}).get("spec", {}).get("gpus") or []
        return np if sorted(g["strategy"] for g in gpus) == ["mig", "soft"] else None

    np = kube.wait(f"the controller's NodePartitioning of {node}", switched, timeout_s=120)
    mig_index = next(g["index"] for g in np["spec"]["gpus"] if g["strategy"] == "mig")
    assert json.loads(np["metadata"]["annotations"]["carve.dev/strategy-changes"]), np["metadata"]
    assert "controller.change" in sc.log_tail(200)

    # The plugin applies it: the status says Applied, the fake GPU runs in MIG mode, and the pool is
    # republished under a higher generation with the GPU's MIG devices.
    def applied():
        obj = _partitioning(api, node) or {}
        status = obj.get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if (
            status.get("observedGeneration") != obj["metadata"]["generation"]
            or conds.get("Applied") != "True"
        ):
            return None
        return status

    status = kube.wait(f"{node}'s plugin applying its NodePartitioning", applied, timeout_s=120)
    gpu = next(g for g in status["gpus"] if g["index"] == mig_index)
    assert (gpu["strategy"], gpu["migMode"]) == ("mig", "Enabled"), status
    assert next(g for g in status["gpus"] if g["index"] != mig_index)["strategy"] == "soft", status
    assert {c["type"]: c["status"] for c in status["conditions"]}["Degraded"] == "False", status
    modes = _fake_mig_modes(sc)
    assert modes[mig_index] == 1 and modes[1 - mig_index] == 0, modes
    gen1, devices1 = _pool(cluster, node)
    assert gen1 > gen0
    mig_devices = [d for d in devices1 if d.startswith(f"gpu-{mig_index}-mig-")]
    assert any("3g40gb" in d for d in mig_devices), devices1

    # The real scheduler places the pod on the MIG instance, and the kubelet runs it.
    assert kube.wait_outcome(api, namespace, "llm", timeout_s=120) == ("scheduled", node)
    result = kube.results(kube.claim_of(api, namespace, "llm"))[0]
    assert result["pool"] == node and result["device"] in mig_devices, result
    assert "3g40gb" in result["device"], result
    kube.wait_running(api, namespace, "llm")

    # The controller said why, on the claim and on its pod.
    events = _events(api, namespace, "ResourceClaim", claim_name)
    assert [e.reason for e in events] == ["GPUStrategyChange"], events
    assert f"{namespace}/{claim_name}" in events[0].message and "mig" in events[0].message, events[0].message
    on_pod = _events(api, namespace, "Pod", "llm")
    assert [(e.reason, e.message) for e in on_pod if e.reason == "GPUStrategyChange"] == [
        ("GPUStrategyChange", events[0].message)
    ], on_pod
    # Nodes no policy rule selects are left alone.
    assert _partitioning(api, N1) is None and _partitioning(api, "e2e-n2") is None

    # Once the pod is gone the idle MIG GPU goes back to the node's default (soft) after minHold.
    kube.delete_pod(api, namespace, "llm")

    def consolidated():
        obj = _partitioning(api, node) or {}
        gpus = {g["index"]: g for g in (obj.get("status") or {}).get("gpus") or []}
        want = {g["index"]: g["strategy"] for g in obj.get("spec", {}).get("gpus") or []}
        return want == {0: "soft", 1: "soft"} and all(
            g.get("strategy") == "soft" and not g.get("pending") for g in gpus.values()
        )

    kube.wait(f"{node}'s MIG GPU back to soft", consolidated, timeout_s=120)
    assert _fake_mig_modes(sc) == [0, 0]
    _gen2, devices2 = _pool(cluster, node)
    assert not [d for d in devices2 if "mig" in d], devices2
    # The chart's RBAC allowed every call it made: no write failed, nothing forbidden.
    assert sc.controller
    log = sc.controller.log.read_text(errors="replace")
    for bad in ("controller.plan-failed", "controller.write-failed", "controller.event-failed", "Forbidden"):
        assert bad not in log, f"{bad} in the controller's log:\n{sc.log_tail()}"
