"""The soak's faults: each kills or damages one component and brings it back the way an operator's
supervisor (systemd, the DaemonSet controller) would, then waits until the component serves again. What it
returns is the recovery time: from the fault to serving again.

Kinds (FAULTS): kill -9 of a node's plugin (also with CARVE_FAULT, so that it dies in the middle of a
prepare or of a MIG instance's creation), of a kubelet, of a containerd, of the API server and of etcd; a
corrupt checkpoint file; clock skew of a node's plugin by minutes (libfaketime, where Debian's `faketime`
is installed); a full plugin state directory (a tmpfs of its own in the soak); and, where the soak runs
them (Extras), kill -9 of the strategy controller (the leader), the legacy device plugin and the extender.

One kind lasts: `plugin-outage` (issue 30) kills a node's plugin and leaves it down for minutes while the
soak's pods keep coming (Outage: begun here, ended by the soak's loop), then starts it again and checks
what the outage must not break: no claim lost, every pod that waited on it running within 30 s.
"""

from __future__ import annotations

import errno
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from driver import names
from driver.plugin.state.checkpoint import Checkpoint
from e2e import kube
from e2e.cluster.controller import StrategyController
from e2e.cluster.launcher import Cluster
from e2e.cluster.legacy import LegacyShim
from e2e.cluster.nodes import Node
from e2e.cluster.procs import Proc
from e2e.soak.workload import Workload

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
MID_PREPARE = ("prepare-after-checkpoint-started", "prepare-after-limits", "prepare-after-cdi")


@dataclass
class Fault:
    kind: str
    target: str
    at: float
    recovery_s: float = 0.0
    error: str = ""


def restart(c: Cluster, proc: Proc, env: dict[str, str] | None = None) -> Proc:
    """kill -9 and start again with the same command line and environment (`env`: another one): what a
    supervisor does after a crash."""
    proc.kill()
    c.sup.procs.remove(proc)
    return c.sup.start(proc.name, proc.argv, env=proc.env if env is None else env)


def _plugin_started_count(node: Node) -> int:
    return node.plugin.log.read_text(errors="replace").count("event=plugin.started") if node.plugin else 0


def _restart_plugin(c: Cluster, node: Node, env: dict[str, str] | None = None) -> None:
    before = _plugin_started_count(node)
    assert node.plugin
    node.plugin = restart(c, node.plugin, {**node.plugin_env(), **(env or {})})
    kube.wait(f"{node.name}'s plugin serving again", lambda: _plugin_started_count(node) > before, 120)


def plugin_kill(c: Cluster, node: Node, rng: random.Random) -> None:
    _restart_plugin(c, node)


def plugin_kill_mid_prepare(c: Cluster, node: Node, rng: random.Random) -> None:
    """The plugin dies at a point inside the next prepare that reaches it (or is killed after 60 s)."""
    point = rng.choice(MID_PREPARE)
    _arm(c, node, point)


def plugin_kill_mid_mig(c: Cluster, node: Node, rng: random.Random) -> None:
    _arm(c, node, "prepare-after-mig")


def _arm(c: Cluster, node: Node, point: str) -> None:
    _restart_plugin(c, node, env={"CARVE_FAULT": point})
    assert node.plugin
    deadline = time.monotonic() + 60
    while node.plugin.alive() and time.monotonic() < deadline:
        time.sleep(0.5)
    _restart_plugin(c, node)  # without the fault point: recovery from wherever it died


def corrupt_checkpoint(c: Cluster, node: Node, rng: random.Random) -> None:
    assert node.plugin
    node.plugin.kill()
    path = node.plugin_dir / names.CHECKPOINT_FILE
    if path.exists():
        data = path.read_bytes()
        path.write_bytes(data[: max(1, len(data) // 2)] + b"\0garbage")
    _restart_plugin(c, node)


def clock_skew(c: Cluster, node: Node, rng: random.Random) -> None:
    """The node's plugin runs minutes ahead or behind (libfaketime), then back on the real clock."""
    skew = rng.choice(("+5m", "-4m", "+3m"))
    _restart_plugin(c, node, env={"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": skew})
    time.sleep(20)  # publish, prepare and unprepare on the skewed clock
    _restart_plugin(c, node)


def state_disk_full(c: Cluster, node: Node, rng: random.Random) -> None:
    """The plugin's state directory (its own tmpfs in the soak) is full for 10-20 s while pods keep coming:
    prepares there fail with the claim's error and are retried by the kubelet; the plugin must not die, and
    must not lose or tear its checkpoint (the invariants after the fault and the final leak check see to
    both). Its recovery time is the time the directory stayed full: the plugin never stopped serving."""
    assert node.plugin
    before = _plugin_started_count(node)
    ballast = node.plugin_dir / ".soak-ballast"
    chunk = b"\0" * (1 << 20)
    try:
        with ballast.open("wb") as f:
            while True:
                f.write(chunk)
                f.flush()
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    try:
        time.sleep(rng.uniform(10, 20))
    finally:
        ballast.unlink(missing_ok=True)
    crashed = not node.plugin.alive() or _plugin_started_count(node) != before
    if crashed:
        _restart_plugin(c, node)  # so the soak goes on; the fault is still reported as not survived
        raise AssertionError(f"{node.name}'s plugin exited while its state directory was full")


def kubelet_restart(c: Cluster, node: Node, rng: random.Random) -> None:
    assert node.kubelet
    node.kubelet = restart(c, node.kubelet)
    _wait_node_ready(c, node)


def containerd_restart(c: Cluster, node: Node, rng: random.Random) -> None:
    """containerd dies (its shims and so the containers live on) and starts again."""
    assert node.containerd and node.containerd.proc
    env = {"PATH": node.containerd.proc.argv[0].rsplit("/", 1)[0] + ":/usr/sbin:/usr/bin:/sbin:/bin"}
    node.containerd.proc = node.cri = restart(c, node.containerd.proc, env)
    kube.wait(f"{node.name}'s containerd socket", node.containerd.socket.exists, 60)
    _wait_node_ready(c, node)


def apiserver_restart(c: Cluster, node: Node, rng: random.Random) -> None:
    _restart_control_plane(c, "kube-apiserver")


def etcd_restart(c: Cluster, node: Node, rng: random.Random) -> None:
    _restart_control_plane(c, "etcd")


def _answers(fn: Callable[[], object]) -> Callable[[], bool]:
    """A wait check that counts a refused or failed call as "not yet" (the component is coming back)."""

    def check() -> bool:
        try:
            return bool(fn())
        except Exception:
            return False

    return check


def _restart_control_plane(c: Cluster, name: str) -> None:
    proc = next(p for p in c.sup.procs if p.name == name)
    restart(c, proc)
    core = client.CoreV1Api(c.api())
    answers = _answers(lambda: core.list_namespace(_request_timeout=5))
    kube.wait(f"{name} back (the API answers)", answers, 120)


def _wait_node_ready(c: Cluster, node: Node) -> None:
    """Until the node's kubelet renews its Lease after the fault and the Node is Ready: the Lease is the
    kubelet's heartbeat (every 10 s); the Node's own status is rewritten only on a change or every 5 min."""
    api = c.api()
    leases, core = client.CoordinationV1Api(api), client.CoreV1Api(api)
    since = time.time()

    def ready() -> bool:
        lease = leases.read_namespaced_lease(node.name, "kube-node-lease")
        renewed = lease.spec.renew_time.timestamp() if lease.spec and lease.spec.renew_time else 0
        conditions = core.read_node(node.name).status.conditions or []
        is_ready = any(cond.type == "Ready" and cond.status == "True" for cond in conditions)
        return renewed >= since and is_ready

    kube.wait(f"{node.name}'s kubelet renewing its Lease, Node Ready", _answers(ready), 120)


# --- a plugin lost for minutes under a stream of pods (issue 30) ----------------------------------------

OUTAGE = "plugin-outage"
WAITING_START_S = 30.0  # every pod that waited on the lost plugin runs within this of its return


@dataclass
class Outage:
    """A node's plugin killed and left down until `ends_at` (monotonic) while the soak's loop goes on."""

    fault: Fault
    node: Node
    proc: Proc  # the killed plugin: started again with the same command line
    ends_at: float
    kept: dict[str, str]  # pod -> claim UID: pods running on the node when it went, kept past its return
    devices: set[str]  # the node's published devices when it went: all published again after its return
    figures: dict[str, object] = field(default_factory=dict)


def _prepared(node: Node) -> set[str]:
    """The claim UIDs the node's checkpoint holds (read from disk: the plugin may be down)."""
    return set(Checkpoint(node.plugin_dir / names.CHECKPOINT_FILE, "").load(move_aside=False).claims)


def _claim_uids(api, namespace: str, pod) -> list[str]:
    resource = client.CustomObjectsApi(api)
    out = []
    for st in pod.status.resource_claim_statuses or []:
        if st.resource_claim_name:
            claim = resource.get_namespaced_custom_object(
                kube.GROUP, kube.VERSION, namespace, "resourceclaims", st.resource_claim_name
            )
            out.append(claim["metadata"]["uid"])
    return out


def _published(api, node: str) -> set[str]:
    slices = client.CustomObjectsApi(api).list_cluster_custom_object(
        kube.GROUP, kube.VERSION, "resourceslices"
    )
    return {
        d["name"]
        for s in slices["items"]
        if s["spec"].get("driver") == names.DRIVER_NAME and s["spec"].get("nodeName") == node
        for d in s["spec"].get("devices") or []
    }


def outage_length(wanted_s: float, left_s: float) -> float:
    """How long the next outage lasts: `wanted_s`, cut so the plugin is back a minute before the soak ends
    (its return and the waiting pods are what is checked); 0 when less than 30 s would be left."""
    length = min(wanted_s, left_s - 60.0)
    return length if length >= 30.0 else 0.0


def begin_outage(c: Cluster, work: Workload, rng: random.Random, length_s: float) -> Outage:
    """kill -9 of a random DRA node's plugin, left down for `length_s`: the pods running there keep their
    claims; the kubelet's prepares for new ones fail until it is back (and the kubelet withdraws the node's
    ResourceSlices meanwhile). The soak's pods running there are kept alive past its return, to be checked."""
    target = rng.choice(sorted(n.name for n in c.specs or ()))
    node = c.nodes[target]
    assert node.plugin
    api = c.api()
    core = client.CoreV1Api(api)
    kept = {}
    for p in work.pods.values():
        if p.deleted:
            continue
        pod = core.read_namespaced_pod(p.name, work.namespace)
        if pod.spec.node_name == target and pod.status.phase == "Running":
            for uid in _claim_uids(api, work.namespace, pod):
                kept[p.name] = uid
            p.delete_at = float("inf")  # until checked after the plugin's return
    devices = _published(api, target)
    fault = Fault(OUTAGE, target, time.time())
    proc = node.plugin
    proc.kill()
    c.sup.procs.remove(proc)
    figures: dict[str, object] = {"length_s": round(length_s, 1)}
    return Outage(fault, node, proc, time.monotonic() + length_s, kept, devices, figures)


def end_outage(c: Cluster, work: Workload, rng: random.Random, outage: Outage) -> list[str]:
    """Start the plugin again and check the outage's invariants; the violations found (empty: it held):
    - no claim lost: every pod kept is still running with its claim in the node's checkpoint;
    - the node's devices are all published again within WAITING_START_S;
    - every pod that waited on the plugin runs within WAITING_START_S of its start: those bound to the node
      and not running at its return (the kubelet's prepare retries), and those not bound at its return that
      the scheduler places on the node within that time (its requeue on the republished slices). A pod still
      unbound then, or placed elsewhere, waited on something else (capacity, a kind no node publishes).
    No device handed out twice is the capacity check the soak runs right after."""
    api = c.api()
    core = client.CoreV1Api(api)
    node, target = outage.node, outage.fault.target
    waiting = []
    for p in work.pods.values():
        if p.deleted:
            continue
        pod = core.read_namespaced_pod(p.name, work.namespace)
        if pod.status.phase not in ("Running", "Succeeded") and pod.spec.node_name in (None, target):
            waiting.append(p)  # a candidate: it counts if it is (or gets) bound to the node
            p.delete_at = max(p.delete_at, time.monotonic() + WAITING_START_S + 30)
    before = _plugin_started_count(node)
    back = time.monotonic()
    node.plugin = c.sup.start(outage.proc.name, outage.proc.argv, env=outage.proc.env)
    problems = []
    t0 = time.monotonic()
    try:
        kube.wait(f"{target}'s plugin serving again", lambda: _plugin_started_count(node) > before, 120)
    except Exception as e:
        outage.fault.error = f"{type(e).__name__}: {e}"
        return [f"fault {OUTAGE} on {target}: the plugin did not start again: {e}"]
    outage.figures["serving_after_s"] = round(time.monotonic() - t0, 1)
    # Poll until every candidate runs or WAITING_START_S from the plugin's start has passed.
    started: dict[str, float] = {}
    on_node: set[str] = set()
    slices_back: float | None = None
    while time.monotonic() - back <= WAITING_START_S:
        if slices_back is None and outage.devices <= _published(api, target):
            slices_back = time.monotonic() - back
        for p in waiting:
            if p.name not in started:
                pod = core.read_namespaced_pod(p.name, work.namespace)
                if pod.spec.node_name == target:
                    on_node.add(p.name)
                if pod.status.phase in ("Running", "Succeeded"):
                    started[p.name] = time.monotonic() - back
                    p.ran = True
        if slices_back is not None and len(started) == len(waiting):
            break
        time.sleep(1)
    if slices_back is None:
        missing = sorted(outage.devices - _published(api, target))
        problems.append(
            f"{OUTAGE} on {target}: devices not published again {WAITING_START_S:.0f} s after: {missing}"
        )
    late = sorted(name for name in on_node if name not in started)
    if late:
        problems.append(
            f"{OUTAGE} on {target}: pods waiting at the plugin's return not running {WAITING_START_S:.0f} s "
            f"after it: {late}"
        )
    # No claim lost: the pods that ran through the outage still run, their claims still prepared.
    prepared = _prepared(node)
    for name, uid in sorted(outage.kept.items()):
        pod = core.read_namespaced_pod(name, work.namespace)
        if pod.status.phase != "Running":
            phase = pod.status.phase
            problems.append(f"{OUTAGE} on {target}: pod {name}, running before the outage, is {phase}")
        if uid not in prepared:
            problems.append(f"{OUTAGE} on {target}: claim {uid} of pod {name} lost from the checkpoint")
        work.pods[name].delete_at = time.monotonic() + rng.uniform(*work.lifetime_s)
    waited = {name: t for name, t in started.items() if name in on_node}
    outage.figures.update(
        slices_back_s=None if slices_back is None else round(slices_back, 1),
        waiting=len(on_node),
        waiting_started_max_s=round(max(waited.values()), 1) if waited else None,
        kept=len(outage.kept),
        waited_elsewhere=len(waiting) - len(on_node),  # candidates that waited on something else
    )
    outage.fault.recovery_s = time.monotonic() - t0
    if problems:
        outage.fault.error = "; ".join(problems)
    return problems


# --- the components beside the nodes' plugins ------------------------------------------------------------


@dataclass
class Extras:
    """What the soak runs besides the DRA nodes: the legacy shim and the strategy controller."""

    shim: LegacyShim | None = None
    controller: StrategyController | None = None


def controller_kill(c: Cluster, x: Extras, rng: random.Random) -> None:
    """kill -9 of the controller leader; its container restarts with the same identity and leads again."""
    assert x.controller and x.controller.controller
    killed_at = time.time()
    x.controller.controller = restart(c, x.controller.controller)
    x.controller.wait_leading(120, renewed_since=killed_at)


def device_plugin_kill(c: Cluster, x: Extras, rng: random.Random) -> None:
    """kill -9 of the legacy device plugin: it registers with the kubelet again and re-advertises."""
    assert x.shim and x.shim.device_plugin
    before = x.shim.device_plugin.log.read_text(errors="replace").count("event=registration.accepted")
    x.shim.device_plugin = restart(c, x.shim.device_plugin)
    x.shim.wait_advertised(log_offset=before, timeout_s=120)


def extender_kill(c: Cluster, x: Extras, rng: random.Random) -> None:
    """kill -9 of the scheduler extender: it lists everything again and answers /readyz."""
    assert x.shim and x.shim.extender
    x.shim.extender = restart(c, x.shim.extender)
    x.shim.wait_extender_ready(120)


EXTRA_FAULTS: dict[str, Callable[[Cluster, Extras, random.Random], None]] = {
    "controller-kill": controller_kill,
    "device-plugin-kill": device_plugin_kill,
    "extender-kill": extender_kill,
}


Action = Callable[[Cluster, Node, random.Random], None]
FAULTS: dict[str, Action] = {
    "plugin-kill": plugin_kill,
    "plugin-kill-mid-prepare": plugin_kill_mid_prepare,
    "plugin-kill-mid-mig": plugin_kill_mid_mig,
    "corrupt-checkpoint": corrupt_checkpoint,
    "clock-skew": clock_skew,
    "kubelet-restart": kubelet_restart,
    "containerd-restart": containerd_restart,
    "apiserver-restart": apiserver_restart,
    "etcd-restart": etcd_restart,
    "state-disk-full": state_disk_full,
}


def available(c: Cluster, gates_on: bool, extras: Extras | None = None) -> list[str]:
    """The fault kinds this cluster can take: MIG only with gates on, containerd only where it runs, the
    clock only where libfaketime is installed, the controller's and the shim's where they run."""
    optional = ("plugin-kill-mid-mig", "containerd-restart", "clock-skew", "state-disk-full")
    out = [k for k in FAULTS if k not in optional] + [OUTAGE]
    if gates_on:
        out.append("plugin-kill-mid-mig")
    if c.runtime == "containerd":
        out.append("containerd-restart")
    if FAKETIME_LIB.exists() or shutil.which("faketime"):
        out.append("clock-skew")
    if c.state_tmpfs_mib:
        out.append("state-disk-full")
    if extras and extras.controller:
        out.append("controller-kill")
    if extras and extras.shim:
        out += ["device-plugin-kill", "extender-kill"]
    return sorted(out)


def inject(c: Cluster, kind: str, rng: random.Random, extras: Extras | None = None) -> Fault:
    if kind in EXTRA_FAULTS:
        fault = Fault(kind, kind.removesuffix("-kill"), time.time())
        t0 = time.monotonic()
        try:
            EXTRA_FAULTS[kind](c, extras or Extras(), rng)
        except Exception as e:
            fault.error = f"{type(e).__name__}: {e}"
        fault.recovery_s = time.monotonic() - t0
        return fault
    # The DRA nodes the cluster started with: the shim's and the controller's nodes run no DRA plugin of
    # the workload's (the controller's node has one, but its faults are the controller's).
    nodes = sorted(n.name for n in c.specs or ())
    # MIG lives on n1's GPU 0 (DEFAULT_NODES); every other node fault picks a node at random
    target = nodes[0] if kind == "plugin-kill-mid-mig" else rng.choice(nodes)
    if kind in ("apiserver-restart", "etcd-restart"):
        target = "control-plane"
    fault = Fault(kind, target, time.time())
    t0 = time.monotonic()
    try:
        FAULTS[kind](c, c.nodes[nodes[0] if target == "control-plane" else target], rng)
    except Exception as e:  # a component that did not come back is a violation, reported by the caller
        fault.error = f"{type(e).__name__}: {e}"
    fault.recovery_s = time.monotonic() - t0
    return fault
