"""What the upgrade e2e modules share (e2e/test_upgrade.py: two tags of this tree's image;
e2e/test_upgrade_previous.py: from a previous release to this tree): the one-node Helm-release cluster with
a pod of each kind on it, a rollout of the plugin's DaemonSet through `helm upgrade`/`helm rollback`, and
the checks after one (running pods untouched, quota held, claims prepared and unprepared).
docs/e2e.md, "Upgrades with live claims".
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kubernetes import client

from driver import names
from driver.plugin.state.checkpoint import Checkpoint
from e2e import kube
from e2e.cluster.chart import NAMESPACE, RELEASE
from e2e.cluster.images import Image
from e2e.cluster.launcher import REPO, Cluster
from e2e.cluster.nodes import Node, NodeSpec
from e2e.cluster.versions import DEFAULT_MINOR, resolve
from e2e.sessions import cluster_session
from e2e.soak import invariants

NODE = "e2e-u1"
# GPU 0 for MIG, 1 time-sliced, 2 whole, 3 (the T4) soft: one pod of each kind fits on the node at once.
SPEC = NodeSpec(NODE, "fake:3xA100-80GB,1xT4", "0=mig,1=timeslice,2=exclusive,soft")
NAMESPACE_WORK = "upgrade"
DS = f"{RELEASE}-kubelet-plugin"
CHART = REPO / "helm" / "carve"


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

    def claim_uid(self, name: str) -> str:
        return kube.claim_of(self.api, NAMESPACE_WORK, name)["metadata"]["uid"]

    def snapshot(self, name: str) -> Live:
        pod = client.CoreV1Api(self.api).read_namespaced_pod(name, NAMESPACE_WORK)
        claim_uid = self.claim_uid(name)
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

    def upgrade_args(self, image: Image | None = None, chart: Path = CHART, **plugin: object) -> list[str]:
        """`helm upgrade` of the release to `chart` (this tree's) with `image` (the one built here)."""
        base = chart / "ci" / "fake-gpus-values.yaml"
        values = self.c.helm_values(self.node, image, chart, **plugin)
        return ["upgrade", RELEASE, str(chart), "-f", str(base), "-f", str(values)]

    def plugin_log(self, pod: client.V1Pod) -> str:
        return self.c.kubectl("logs", "-n", NAMESPACE, pod.metadata.name, "-c", "plugin").stdout

    def checkpoint_claims(self) -> set[str]:
        loaded = Checkpoint(self.node.plugin_dir / names.CHECKPOINT_FILE, "").load(move_aside=False)
        return set(loaded.claims)

    def spec_path(self, uid: str) -> Path:
        return self.node.cdi_dir / f"k8s.{names.DRIVER_NAME}-claim_{uid}.json"

    def claim_dirs(self, uid: str) -> tuple[Path, Path]:
        """Claim `uid`'s directory under the run directory, and under the plugin directory where a release
        before --run-dir put it."""
        return self.node.run_dir / "claims" / uid, self.node.plugin_dir / "claims" / uid


def release_session(
    what: str, release_chart: Path | None = None, release_image: Image | None = None, extra: tuple = ()
) -> Iterator[Upgrade]:
    """A fixture's body: the one-node Helm-release cluster (`release_chart`/`release_image` installed, by
    default this tree's), a ResourceClaimTemplate per kind and a pod `old-<kind>` of each (and one
    `old-<kind>-2` more of each kind in `extra`) Running; the cluster stops after."""
    runtime = os.environ.get("CARVE_E2E_RUNTIME", "containerd")
    if runtime != "containerd":
        pytest.skip(f"the plugin's DaemonSet needs real containers; this session runs {runtime} on purpose")
    version = resolve(os.environ.get("CARVE_E2E_K8S", DEFAULT_MINOR), os.environ.get("CARVE_E2E_GATES", "on"))
    root = Path(tempfile.mkdtemp(prefix=f"carve-e2e-{what}-{version.minor}-"))
    c = Cluster(
        version,
        root,
        specs=(SPEC,),
        runtime="containerd",
        plugin_mode="helm",
        release_chart=release_chart,
        release_image=release_image,
    )
    session = cluster_session(c, root, f"{version.label} helm-release cluster ({what})")
    next(session)
    try:
        api = c.api()
        u = Upgrade(c, c.nodes[NODE], api, version.gates_on)
        u.plugin_uids.append(u.plugin_pod().metadata.uid)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE_WORK}})
        for kind, requests in kinds(u.gates_on).items():
            kube.create(api, NAMESPACE_WORK, kube.template(kind, requests))
        pods = {f"old-{kind}": kind for kind in kinds(u.gates_on)} | {f"old-{kind}-2": kind for kind in extra}
        for name, kind in pods.items():
            u.make_pod(name, kind)
        for name in pods:
            kube.wait_running(api, NAMESPACE_WORK, name, timeout_s=180)
        yield u
    finally:
        next(session, None)  # stops the cluster


def assert_untouched(u: Upgrade, step: str) -> None:
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


def assert_started_with(u: Upgrade, pod: client.V1Pod, claims: int) -> None:
    log = u.plugin_log(pod)
    started = [line for line in log.splitlines() if "event=plugin.started" in line]
    assert started and re.search(rf"\bclaims={claims}\b", started[-1]), log[-3000:]


def assert_quota_holds(u: Upgrade, step: str, pod: str = "old-soft") -> None:
    assert invariants.quota(u.c, NAMESPACE_WORK, pod) == [], f"{step}: {pod}"


def assert_prepares(u: Upgrade, name: str, kind: str) -> Live:
    u.make_pod(name, kind)
    kube.wait_running(u.api, NAMESPACE_WORK, name, timeout_s=120)
    live = u.snapshot(name)  # asserts its CDI spec
    assert live.claim_uid in u.checkpoint_claims(), f"{name}: claim not in the checkpoint"
    return live


def assert_unprepares(u: Upgrade, name: str) -> str:
    """Deleting the pod unprepares its claim: CDI spec, claim directory, checkpoint entry (and a MIG
    instance) gone from the node. Returns the claim's UID."""
    uid = u.snapshot(name).claim_uid
    migs_before = invariants.mig_instances(u.node)
    kube.delete_pod(u.api, NAMESPACE_WORK, name)
    spec = u.spec_path(uid)
    # Under the run directory, or the plugin directory where a release before --run-dir put it.
    claim_dirs = u.claim_dirs(uid)

    def gone():
        return (
            not spec.exists() and not any(d.exists() for d in claim_dirs) and uid not in u.checkpoint_claims()
        )

    kube.wait(f"claim {uid} of {name} unprepared", gone, 120)
    if name.endswith("-mig"):
        assert len(invariants.mig_instances(u.node)) == len(migs_before) - 1, "the MIG instance is left"
    return uid


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (a claim's region tmpfs is one), as this host sees them."""
    top = str(path.resolve())
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    return [p for p in points if p == top or p.startswith(top + "/")]
