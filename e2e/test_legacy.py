"""The legacy shim end to end (docs/legacy.md, issue 9): the real kube-scheduler of the chart's
`carve-scheduler` profile calls `carve scheduler-extender`, the real kubelet of a legacy node calls
`carve device-plugin` (Allocate, then PreStartContainer), and the fake CRI records what each container is
created with. The node and the shim are added to the session's cluster for this module and removed after
(e2e/cluster/legacy.py).

Pods ask HAMi's resources (`nvidia.com/gpu`, `gpumem`, `gpucores`); what a container gets is read where a
runtime would read it: the CDI device names the kubelet passed to the runtime, resolved in the node's CDI
specs (the limits in the `CARVE_*` env, the GPU's device node, the limiter).
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from driver import names
from e2e import kube
from e2e.cluster.chart import NAMESPACE

pytestmark = pytest.mark.legacy  # runs on minors without DRA too (1.29: `make e2e-legacy K8S=1.29`)

MIB = 1024**2
NODE = "e2e-l1"  # 2 x A100-80GB (81920 MiB) + 1 x T4 (15360 MiB), split 10


@pytest.fixture(scope="module")
def legacy(cluster):
    from e2e.cluster.legacy import LegacyShim

    shim = LegacyShim(cluster)
    t0 = time.monotonic()
    try:
        shim.start()
    except Exception as e:
        pytest.fail(f"e2e: the legacy shim did not start (logs in {cluster.root / 'logs'}): {e}")
    print(
        f"\ne2e: legacy node, device plugin, extender and carve-scheduler up in {time.monotonic() - t0:.1f}s"
    )
    yield shim
    shim.stop()


def created(shim, namespace: str, pod: str) -> dict:
    """The fake CRI's record of the pod's `main` container (what the kubelet asked the runtime for)."""
    entries = [
        e
        for e in shim.node.created_containers()
        if e["namespace"] == namespace and e["pod"] == pod and e["container"] == "main"
    ]
    assert len(entries) == 1, f"{namespace}/{pod}: {len(entries)} CreateContainer calls for main"
    return entries[0]


def container_view(shim, namespace: str, pod: str) -> dict:
    """What the runtime applies to the container: the CDI devices it was given, resolved in the node's
    CDI specs (as containerd would): env, device nodes, mounts."""
    entry = created(shim, namespace, pod)
    devices = entry["cdiDevices"] or []
    assert devices, f"{namespace}/{pod}: the kubelet passed no CDI devices ({entry})"
    specs = shim.node.cdi_specs()
    env: dict[str, str] = dict(entry["env"])
    nodes: list[str] = []
    mounts: list[str] = []
    for qualified in devices:
        kind, _, dev = qualified.partition("=")
        assert kind == names.CDI_KIND, qualified
        found = [(spec, d) for spec in specs.values() for d in spec.get("devices", []) if d["name"] == dev]
        assert len(found) == 1, f"{namespace}/{pod}: CDI device {qualified} in {len(found)} specs"
        spec, d = found[0]
        for edits in (spec.get("containerEdits") or {}, d.get("containerEdits") or {}):
            env |= dict(e.split("=", 1) for e in edits.get("env") or [])
            nodes += [n["path"] for n in edits.get("deviceNodes") or []]
            mounts += [m["containerPath"] for m in edits.get("mounts") or []]
    return {"cdi": devices, "env": env, "device_nodes": nodes, "mounts": mounts}


def record(api, pod: client.V1Pod) -> dict:
    cm = client.CoreV1Api(api).read_namespaced_config_map(
        f"{names.LEGACY_RECORD_PREFIX}{pod.metadata.uid}", NAMESPACE
    )
    return json.loads(cm.data["assignment"])


def minors(shim) -> dict[str, int]:
    n = client.CoreV1Api(shim.cluster.api()).read_node(NODE)
    inventory = json.loads(n.metadata.annotations[names.LEGACY_INVENTORY_ANNOTATION])
    return {g["uuid"]: g["minor"] for g in inventory["gpus"]}


def check_gets_exactly(shim, api, namespace: str, name: str, mem: int, cores: int, gpus: int = 1) -> None:
    pod = kube.wait_running(api, namespace, name)
    assert pod.spec.node_name == NODE
    assigned = record(api, pod)
    assert (assigned["namespace"], assigned["name"], assigned["node"]) == (namespace, name, NODE)
    devices = assigned["containers"][0]["devices"]
    assert [(d["memoryMiB"], d["cores"]) for d in devices] == [(mem, cores)] * gpus
    view = container_view(shim, namespace, name)
    assert len(view["cdi"]) == gpus
    env = view["env"]
    for i in range(gpus):
        assert env.get(f"{names.ENV_MEMORY_LIMIT}_{i}") == str(mem * MIB), (name, env)
        assert env.get(f"{names.ENV_CORES_LIMIT}_{i}") == str(cores), (name, env)
    assert f"{names.ENV_MEMORY_LIMIT}_{gpus}" not in env
    # The assigned GPUs' device nodes and no other GPU's; the limiter is mounted.
    by_uuid = minors(shim)
    want = sorted(f"/dev/nvidia{by_uuid[d['uuid']]}" for d in devices)
    got = sorted(p for p in view["device_nodes"] if p.removeprefix("/dev/nvidia").isdigit())
    assert got == want, (name, view["device_nodes"])
    assert any(m.endswith(names.LIMITER_LIBRARY) for m in view["mounts"]), view["mounts"]
    # The kubelet called PreStartContainer for these devices, and the plugin found this pod behind them.
    allocation = view["cdi"][0].partition("=")[2].rsplit("-", 1)[0]
    done = [
        line
        for line in shim.device_plugin.log.read_text().splitlines()
        if "event=prestart.done" in line and f" pod={namespace}/{name} " in line
    ]
    assert any(f" allocation={allocation} " in line for line in done), (name, allocation, done)


def test_sizes_bound_together_never_swapped(legacy, api, namespace):
    """Two pods of different sizes created at the same moment onto one node, several rounds: each
    container gets its own limits, through the extender's bind and the plugin's PreStartContainer."""
    sizes = {"small": (4096, 20), "big": (30000, 70)}
    for rnd in range(5):
        for label, (mem, cores) in sizes.items():
            kube.create(api, namespace, kube.legacy_pod(f"{label}-{rnd}", 1, mem, cores))
        for label, (mem, cores) in sizes.items():
            check_gets_exactly(legacy, api, namespace, f"{label}-{rnd}", mem, cores)
        for label in sizes:
            kube.delete_pod(api, namespace, f"{label}-{rnd}")


def test_unfit_pod_pending_with_extender_reason_until_share_freed(legacy, api, namespace):
    # Two A100s take 60000 MiB each; the T4 has 15360 MiB.
    kube.create(api, namespace, kube.legacy_pod("first", 2, 60000, 50))
    check_gets_exactly(legacy, api, namespace, "first", 60000, 50, gpus=2)
    kube.create(api, namespace, kube.legacy_pod("second", 2, 30000, 10))
    verdict, message = kube.wait_outcome(api, namespace, "second")
    assert verdict == "unschedulable", message
    # The extender's reason for the node, as the scheduler reports it on the pod.
    assert "container main: 0 of 2 GPUs fit" in message, message
    assert message.count("21920 MiB free < 30000") == 2, message  # the A100s, 81920 - 60000 MiB each
    time.sleep(3)
    assert kube.outcome(api, namespace, "second")[0] == "unschedulable"
    kube.delete_pod(api, namespace, "first")
    # Its share is free again: the pending pod is placed on the same two GPUs.
    check_gets_exactly(legacy, api, namespace, "second", 30000, 10, gpus=2)


def test_pod_not_bound_by_the_extender_never_starts(legacy, api, namespace):
    """A pod placed on the node by hand (nodeName) has no assignment record: the kubelet still calls
    Allocate, but PreStartContainer refuses it, so no container is created with any limits."""
    kube.create(api, namespace, kube.legacy_pod("by-hand", 1, 1024, 10, nodeName=NODE))
    core = client.CoreV1Api(api)

    def refused():
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=by-hand").items
        return [e.message for e in events if "no assignment record" in (e.message or "")]

    messages = kube.wait("the kubelet's event of the refused PreStartContainer", refused)
    assert "carve" in messages[0], messages
    assert core.read_namespaced_pod("by-hand", namespace).status.phase == "Pending"
    assert not [e for e in legacy.node.created_containers() if e["pod"] == "by-hand"]


def test_kubelet_restart_reregisters_and_keeps_pods(legacy, api, namespace):
    """The kubelet restarts (its device-plugin dir is wiped, kubelet.sock re-created): the plugin registers
    again, the running pod keeps its allocation, and a new pod is admitted with its own limits on GPU
    device IDs the running pod does not hold."""
    kube.create(api, namespace, kube.legacy_pod("before", 1, 8000, 30))
    check_gets_exactly(legacy, api, namespace, "before", 8000, 30)
    held = record(api, kube.wait_running(api, namespace, "before"))["containers"][0]["devices"]
    registered = "event=registration.accepted"
    before = legacy.device_plugin.log.read_text().count(registered)
    node = legacy.node
    old = node.kubelet
    old.stop()
    legacy.cluster.sup.procs.remove(old)
    node.kubelet = legacy.cluster.sup.start(old.name, old.argv)
    kube.wait(
        "the device plugin registered with the restarted kubelet",
        lambda: legacy.device_plugin.log.read_text().count(registered) > before,
        120,
    )
    # The restarted kubelet reports 0 nvidia.com/gpu until the plugin's devices are back; a pod created in
    # that window would wait for the scheduler's 5-minute flush (docs/legacy.md, "Kubelet restarts").
    core = client.CoreV1Api(api)
    kube.wait(
        f"{names.LEGACY_GPU} allocatable on {NODE} again",
        lambda: (core.read_node(NODE).status.allocatable or {}).get(names.LEGACY_GPU) == "30",
        120,
    )
    kube.create(api, namespace, kube.legacy_pod("after", 1, 2000, 5))
    check_gets_exactly(legacy, api, namespace, "after", 2000, 5)
    assert kube.wait_running(api, namespace, "before")
    assert record(api, kube.wait_running(api, namespace, "before"))["containers"][0]["devices"] == held
    # Not created again by the restarted kubelet (one CreateContainer), and the new pod's device IDs (so
    # its CDI devices) are not the running pod's.
    assert set(container_view(legacy, namespace, "after")["cdi"]).isdisjoint(
        container_view(legacy, namespace, "before")["cdi"]
    )
