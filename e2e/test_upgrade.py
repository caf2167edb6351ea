"""Upgrades with live claims (issue 22): carve installed with `helm install` (plugin mode `helm`: one release,
one node, the carve image built here), pods of every kind running on it, then `helm upgrade` to a second
tag of the image with a changed value (the plugin's log level), which rolls the DaemonSet's pod, and
`helm rollback` to the first revision, which rolls it back. Across both:
- running pods are untouched (same containers, no restart), their claims stay allocated and reserved, and
  their CDI specs are the same bytes: the new plugin pod loads the prepared claims from the checkpoint on
  the host (its `plugin.started` event counts them) instead of preparing them again;
- the soft slice's quota still holds in its running container (the fake libcuda through the limiter);
- a new claim prepares with the new plugin; deleting a pod prepared by the old plugin unprepares it
  cleanly with the new one (CDI spec, claim directory, checkpoint entry and MIG instance gone);
- at the end, with every pod gone, nothing is left on the node.

Needs real containers (the plugin runs in the chart's pod): skipped, naming the runtime, on the fake CRI.
CARVE_E2E_UPGRADE=0 leaves it out (it starts a cluster of its own). docs/e2e.md, "Upgrades with live claims".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client

from driver import names
from driver.plugin.state.checkpoint import Checkpoint
from e2e import kube
from e2e.cluster.launcher import NAMESPACE, RELEASE, Cluster
from e2e.cluster.nodes import Node, NodeSpec
from e2e.cluster.versions import DEFAULT_MINOR, resolve
from e2e.sessions import cluster_session
from e2e.soak import invariants

NODE = "e2e-u1"
# GPU 0 for MIG, 1 time-sliced, 2 whole, 3 (the T4) soft: one pod of each kind fits on the node at once.
SPEC = NodeSpec(NODE, "fake:3xA100-80GB,1xT4", "0=mig,1=timeslice,2=exclusive,soft")
NAMESPACE_WORK = "upgrade"
UPGRADE_TAG_SUFFIX = "-upgrade"
DS = f"{RELEASE}-kubelet-plugin"


def on_gpu(index: int) -> dict:
    return {"cel": {"expression": f'device.attributes["{names.DRIVER_NAME}"].index == {index}'}}


def kinds(gates_on: bool) -> dict[str, list[dict]]:
    """Each kind's claim requests on this node; with the gates off no MIG devices are published, the soft
    GPU falls back to slots and the time-sliced one to a whole GPU (the plugin's fallback: time-slicing
    needs DRAConsumableCapacity), so "timeslice" is then a whole GPU 0 or 1, two of which fit."""
    either = f'device.attributes["{names.DRIVER_NAME}"].index in [0, 1]'
    timeslice = (
        [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_TIMESLICE}}]
        if gates_on
        else [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": names.CLASS_GPU,
                    "selectors": [{"cel": {"expression": either}}],
                },
            }
        ]
    )
    out = {
        "soft": kube.soft_or_slot(gates_on),
        # GPU 2: the MIG GPU publishes a whole device too, which would take all of GPU 0.
        "whole": [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU, "selectors": [on_gpu(2)]}}],
        "timeslice": timeslice,
    }
    if gates_on:
        out["mig"] = kube.mig_profile("1g.10gb")
    return out


@dataclass
class Live:
    """What a running pod had before a plugin rollout, compared after it."""

    pod_uid: str
    containers: dict[str, str]  # container name -> container ID
    claim_uid: str
    cdi_sha: str


@dataclass
class Upgrade:
    c: Cluster
    node: Node
    api: client.ApiClient
    gates_on: bool
    live: dict[str, Live] = field(default_factory=dict)  # pod name -> before the latest rollout
    migs: list[str] = field(default_factory=list)  # the node's MIG instances before the latest rollout
    plugin_uids: list[str] = field(default_factory=list)  # the plugin pod of each revision

    def make_pod(self, name: str, kind: str) -> None:
        pod = kube.pod(name, claim_template=kind, node=NODE)
        if kind == "soft":  # the quota probe needs the glibc image and the node's fake GPUs
            c = pod["spec"]["containers"][0]
            c["image"] = "e2e/glibc"
            c["env"] = [
                {"name": names.ENV_FAKE_GPUS, "value": SPEC.gpus.removeprefix("fake:")},
                {"name": names.ENV_FAKE_SEED, "value": NODE},
            ]
        kube.create(self.api, NAMESPACE_WORK, pod)

    def snapshot(self, name: str) -> Live:
        pod = client.CoreV1Api(self.api).read_namespaced_pod(name, NAMESPACE_WORK)
        claim_uid = kube.claim_of(self.api, NAMESPACE_WORK, name)["metadata"]["uid"]
        spec = self.node.cdi_dir / f"k8s.{names.DRIVER_NAME}-claim_{claim_uid}.json"
        assert spec.exists(), f"pod {name}: no CDI spec {spec.name} for its claim"
        return Live(
            pod_uid=pod.metadata.uid,
            containers={s.name: s.container_id for s in pod.status.container_statuses or []},
            claim_uid=claim_uid,
            cdi_sha=hashlib.sha256(spec.read_bytes()).hexdigest(),
        )

    def snapshot_all(self) -> None:
        pods = client.CoreV1Api(self.api).list_namespaced_pod(NAMESPACE_WORK).items
        self.live = {p.metadata.name: self.snapshot(p.metadata.name) for p in pods}
        self.migs = invariants.mig_instances(self.node)

    def plugin_pod(self) -> client.V1Pod:
        return self.c.plugin_pod(NODE)

    def roll(self, *helm_args: str) -> client.V1Pod:
        """Runs `helm upgrade` or `helm rollback` and waits until the DaemonSet's new pod is Ready (its
        startup probe: the DRA socket answers; what it loaded is the tests' to check)."""
        self.snapshot_all()
        old = self.plugin_pod().metadata.uid
        t0 = time.monotonic()
        self.c.helm(*helm_args)

        def rolled():
            pod = self.c._maybe(self.plugin_pod)
            ready = pod and any(x.type == "Ready" and x.status == "True" for x in pod.status.conditions or [])
            return pod if ready and pod.metadata.uid != old else None

        pod = kube.wait(f"a new plugin pod on {NODE} Ready after helm {helm_args[0]}", rolled, 180)
        took = time.monotonic() - t0
        print(f"\ne2e: helm {helm_args[0]}: the new plugin pod Ready {took:.1f}s after the command")
        self.plugin_uids.append(pod.metadata.uid)
        return pod

    def plugin_log(self, pod: client.V1Pod) -> str:
        return self.c.kubectl("logs", "-n", NAMESPACE, pod.metadata.name, "-c", "plugin").stdout

    def checkpoint_claims(self) -> set[str]:
        loaded = Checkpoint(self.node.plugin_dir / names.CHECKPOINT_FILE, "").load(move_aside=False)
        return set(loaded.claims)


@pytest.fixture(scope="module")
def up():
    runtime = os.environ.get("CARVE_E2E_RUNTIME", "containerd")
    if runtime != "containerd":
        pytest.skip(f"the plugin's DaemonSet needs real containers; this session runs {runtime} on purpose")
    if os.environ.get("CARVE_E2E_UPGRADE", "1") == "0":
        pytest.skip("CARVE_E2E_UPGRADE=0")
    version = resolve(os.environ.get("CARVE_E2E_K8S", DEFAULT_MINOR), os.environ.get("CARVE_E2E_GATES", "on"))
    root = Path(tempfile.mkdtemp(prefix=f"carve-e2e-upgrade-{version.minor}-"))
    c = Cluster(version, root, specs=(SPEC,), runtime="containerd", plugin_mode="helm")
    session = cluster_session(c, root, f"{version.label} helm-release cluster")
    next(session)
    try:
        api = c.api()
        u = Upgrade(c, c.nodes[NODE], api, version.gates_on)
        u.plugin_uids.append(u.plugin_pod().metadata.uid)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE_WORK}})
        for kind, requests in kinds(u.gates_on).items():
            kube.create(api, NAMESPACE_WORK, kube.template(kind, requests))
        for kind in kinds(u.gates_on):
            u.make_pod(f"old-{kind}", kind)
        for kind in kinds(u.gates_on):
            kube.wait_running(api, NAMESPACE_WORK, f"old-{kind}", timeout_s=180)
        yield u
    finally:
        next(session, None)  # stops the cluster


@pytest.fixture(scope="module")
def upgraded(up: Upgrade) -> Upgrade:
    """`helm upgrade` to a second tag of the same image (imported into the node's containerd) with the
    plugin's log level changed: both change the DaemonSet's pod template, so its pod rolls."""
    assert up.c.image and up.node.containerd
    new_image = up.c.image.name + UPGRADE_TAG_SUFFIX
    up.node.containerd.ctr("images", "tag", "--force", up.c.image.name, new_image)
    values = up.c.helm_values(up.node, logLevel="debug")
    chart = str(Path(__file__).resolve().parents[1] / "helm" / "carve")
    base = Path(chart) / "ci" / "fake-gpus-values.yaml"
    tag = new_image.rsplit(":", 1)[1]
    up.roll("upgrade", RELEASE, chart, "-f", str(base), "-f", str(values), "--set", f"image.tag={tag}")
    return up


@pytest.fixture(scope="module")
def rolled_back(upgraded: Upgrade) -> Upgrade:
    """`helm rollback` to revision 1, with the pods of before the upgrade and the one made after it live."""
    upgraded.roll("rollback", RELEASE, "1")
    return upgraded


def _assert_untouched(u: Upgrade, step: str) -> None:
    """Every pod live before the rollout is the same pod with the same containers, never restarted, its
    claim allocated and reserved for it, its CDI spec the same bytes and still in the checkpoint."""
    core = client.CoreV1Api(u.api)
    held = u.checkpoint_claims()
    # The MIG instances of running pods are the same ones (the new plugin's journal reconciliation
    # destroyed none of them).
    assert invariants.mig_instances(u.node) == u.migs, f"{step}: MIG instances {u.migs} changed"
    for name, before in u.live.items():
        pod = core.read_namespaced_pod(name, NAMESPACE_WORK)
        assert pod.status.phase == "Running", f"{step}: pod {name} is {pod.status.phase}"
        assert pod.metadata.uid == before.pod_uid, f"{step}: pod {name} was replaced"
        now = {s.name: s.container_id for s in pod.status.container_statuses or []}
        assert now == before.containers, (
            f"{step}: pod {name}'s containers changed: {before.containers} -> {now}"
        )
        restarts = {s.name: s.restart_count for s in pod.status.container_statuses or []}
        assert not any(restarts.values()), f"{step}: pod {name} restarted: {restarts}"
        after = u.snapshot(name)
        assert after.claim_uid == before.claim_uid, f"{step}: pod {name} has another claim"
        assert after.cdi_sha == before.cdi_sha, f"{step}: pod {name}'s CDI spec was rewritten"
        claim = kube.claim_of(u.api, NAMESPACE_WORK, name)
        reserved = [r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or []]
        assert kube.results(claim) and reserved == [before.pod_uid], (
            f"{step}: claim of {name}: {claim['status']}"
        )
        assert before.claim_uid in held, f"{step}: claim {before.claim_uid} of {name} not in the checkpoint"


def _assert_started_with(u: Upgrade, pod: client.V1Pod, claims: int) -> None:
    log = u.plugin_log(pod)
    started = [line for line in log.splitlines() if "event=plugin.started" in line]
    assert started and re.search(rf"\bclaims={claims}\b", started[-1]), log[-3000:]


def _assert_quota_holds(u: Upgrade, step: str) -> None:
    assert invariants.quota(u.c, NAMESPACE_WORK, "old-soft") == [], step


def _assert_prepares(u: Upgrade, name: str, kind: str) -> None:
    u.make_pod(name, kind)
    kube.wait_running(u.api, NAMESPACE_WORK, name, timeout_s=120)
    live = u.snapshot(name)  # asserts its CDI spec
    assert live.claim_uid in u.checkpoint_claims(), f"{name}: claim not in the checkpoint"


def _assert_unprepares(u: Upgrade, name: str) -> None:
    """Deleting the pod unprepares its claim: CDI spec, claim directory, checkpoint entry (and a MIG
    instance) gone from the node."""
    uid = u.snapshot(name).claim_uid
    migs_before = invariants.mig_instances(u.node)
    kube.delete_pod(u.api, NAMESPACE_WORK, name)
    spec = u.node.cdi_dir / f"k8s.{names.DRIVER_NAME}-claim_{uid}.json"
    # Under the run directory, or the plugin directory where a release before --run-dir put it.
    claim_dirs = (u.node.run_dir / "claims" / uid, u.node.plugin_dir / "claims" / uid)

    def gone():
        return (
            not spec.exists() and not any(d.exists() for d in claim_dirs) and uid not in u.checkpoint_claims()
        )

    kube.wait(f"claim {uid} of {name} unprepared", gone, 120)
    if name.endswith("-mig"):
        assert len(invariants.mig_instances(u.node)) == len(migs_before) - 1, "the MIG instance is left"


def test_helm_upgrade_rolls_the_plugin_to_the_new_image_and_value(upgraded: Upgrade):
    pod = upgraded.plugin_pod()
    assert pod.metadata.owner_references[0].name == DS
    assert pod.spec.containers[0].image.endswith(UPGRADE_TAG_SUFFIX), pod.spec.containers[0].image
    env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    assert env.get("CARVE_LOG_LEVEL") == "debug", env
    history = json.loads(upgraded.c.helm("history", RELEASE, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed", history
    # The new pod found the prepared claims in the checkpoint on the host: it started with all of them.
    _assert_started_with(upgraded, pod, len(upgraded.live))


def test_running_pods_keep_their_devices_through_the_upgrade(upgraded: Upgrade):
    _assert_untouched(upgraded, "after helm upgrade")


def test_quotas_hold_in_running_containers_after_the_upgrade(upgraded: Upgrade):
    _assert_quota_holds(upgraded, "after helm upgrade")


def test_a_new_claim_prepares_after_the_upgrade(upgraded: Upgrade):
    # The time-sliced GPU takes more than one claim while the old pod still holds it.
    _assert_prepares(upgraded, "new-timeslice", "timeslice")


def test_an_old_pod_unprepares_cleanly_after_the_upgrade(upgraded: Upgrade):
    # Prepared by the old plugin, unprepared by the new one (MIG: the instance the old one created).
    _assert_unprepares(upgraded, "old-mig" if upgraded.gates_on else "old-whole")


def test_helm_rollback_rolls_the_plugin_back(rolled_back: Upgrade):
    pod = rolled_back.plugin_pod()
    assert rolled_back.c.image and pod.spec.containers[0].image == rolled_back.c.image.name
    env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    assert env.get("CARVE_LOG_LEVEL") == "info", env
    assert len(set(rolled_back.plugin_uids)) == 3, rolled_back.plugin_uids
    history = json.loads(rolled_back.c.helm("history", RELEASE, "-o", "json").stdout)
    assert history[-1]["revision"] == 3 and "Rollback to 1" in history[-1]["description"], history
    _assert_started_with(rolled_back, pod, len(rolled_back.live))


def test_running_pods_keep_their_devices_through_the_rollback(rolled_back: Upgrade):
    # Among them new-timeslice, prepared by the upgraded plugin.
    assert "new-timeslice" in rolled_back.live
    _assert_untouched(rolled_back, "after helm rollback")
    _assert_quota_holds(rolled_back, "after helm rollback")


def test_after_the_rollback_claims_prepare_and_unprepare(rolled_back: Upgrade):
    # Gates off: GPU 2 is free since the upgraded plugin unprepared old-whole (no MIG there).
    kind = "mig" if rolled_back.gates_on else "whole"
    _assert_prepares(rolled_back, f"back-{kind}", kind)
    _assert_unprepares(rolled_back, "new-timeslice")  # prepared by the upgraded plugin


def test_nothing_is_left_once_every_pod_is_gone(rolled_back: Upgrade):
    kube.delete_namespace(rolled_back.api, NAMESPACE_WORK)
    kube.wait(
        "nothing of the claims left on the node",
        lambda: not invariants.leaks(rolled_back.c, NAMESPACE_WORK),
        120,
    )
