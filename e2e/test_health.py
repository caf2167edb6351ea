"""GPU health on the real control plane: an XID injected into a node's fake NVML (CARVE_FAKE_XID_FILE,
e2e/cluster/nodes.py) taints every device of that GPU in the API server (withdraws them with the alpha
gates off), a new pod goes to a healthy GPU, the running pod's status shows its device unhealthy (the
kubelet's DRA health stream, ResourceHealthStatus: on from 1.36), and recovery clears it all."""

from __future__ import annotations

import json

from kubernetes import client

from driver import names
from e2e import kube

N1 = "e2e-n1"
TAINT_KEY = f"{names.DRIVER_NAME}/unhealthy"
RECOVERY_S = 20  # --health-recovery-seconds of the e2e nodes (e2e/cluster/nodes.py)


def _index(device: str) -> int:
    """gpu-<minor>[-...] -> the fake GPU's index (minor = index on the fake node)."""
    return int(device.split("-")[1])


def _devices_of(cluster, node: str, index: int) -> list[dict]:
    return [
        d
        for s in cluster.slices(node)
        for d in s["spec"].get("devices") or []
        if d["name"] == f"gpu-{index}" or d["name"].startswith(f"gpu-{index}-")
    ]


def _soft_pod(api, ns: str, name: str, gates_on: bool) -> dict:
    kube.create(api, ns, kube.template(name, kube.soft_or_slot(gates_on)))
    kube.create(api, ns, kube.pod(name, claim_template=name, node=N1))
    kube.wait_running(api, ns, name)
    (r,) = kube.results(kube.claim_of(api, ns, name))
    return r


def _health_of(api, ns: str, pod: str) -> list[tuple[str, str, str]]:
    """(resourceID, health, message) of the pod's allocatedResourcesStatus entries."""
    # Read raw: a client model older than the field would drop allocatedResourcesStatus.
    raw = client.CoreV1Api(api).read_namespaced_pod(pod, ns, _preload_content=False)
    status = json.loads(raw.data).get("status") or {}
    out = []
    for c in status.get("containerStatuses") or []:
        for entry in c.get("allocatedResourcesStatus") or []:
            for res in entry.get("resources") or []:
                out.append((res.get("resourceID", ""), res.get("health", ""), res.get("message", "")))
    return out


def test_xid_taints_the_gpu_a_new_pod_avoids_it_and_recovery_clears(cluster, api, namespace, gates_on):
    node = cluster.nodes[N1]
    first = _soft_pod(api, namespace, "victim", gates_on)
    bad = _index(first["device"])
    with node.xid_file.open("a") as f:
        f.write(f"{bad} 79\n")  # fallen off the bus

    if gates_on:
        tainted = kube.wait(
            f"the devices of GPU {bad} on {N1} tainted",
            lambda: [
                d
                for d in _devices_of(cluster, N1, bad)
                if any(t["key"] == TAINT_KEY and t["value"] == "xid-79" for t in d.get("taints") or [])
            ],
        )
        assert all(t["effect"] == "NoSchedule" for d in tainted for t in d["taints"] if t["key"] == TAINT_KEY)
    else:
        kube.wait(f"the devices of GPU {bad} on {N1} withdrawn", lambda: not _devices_of(cluster, N1, bad))
    events = client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={N1}"
    )
    assert any(e.reason == "GpuUnhealthy" and "xid-79" in e.message for e in events.items)

    # A new pod on the same node goes to the other soft GPU.
    second = _soft_pod(api, namespace, "newcomer", gates_on)
    assert _index(second["device"]) != bad, (first, second)

    # The running pod sees its device unhealthy where the kubelet reads the health stream.
    if cluster.version.minor_int >= 36:
        kube.wait(
            "the victim pod's allocatedResourcesStatus to say Unhealthy",
            lambda: any(h == "Unhealthy" for _, h, _ in _health_of(api, namespace, "victim")),
        )

    # Recovery: RECOVERY_S seconds without a bad signal.
    kube.wait(
        f"GPU {bad}'s devices offered untainted again",
        lambda: (
            (devs := _devices_of(cluster, N1, bad))
            and not any(t["key"] == TAINT_KEY for d in devs for t in d.get("taints") or [])
        ),
        timeout_s=RECOVERY_S + 60,
    )
    events = client.CoreV1Api(api).list_namespaced_event(
        "default", field_selector=f"involvedObject.name={N1}"
    )
    assert any(e.reason == "GpuHealthy" for e in events.items)
    if cluster.version.minor_int >= 36:
        kube.wait(
            "the victim pod's device Healthy again",
            lambda: any(h == "Healthy" for _, h, _ in _health_of(api, namespace, "victim")),
        )


def test_application_xid_changes_nothing(cluster, api, gates_on):
    node = cluster.nodes[N1]
    before = {d["name"]: d.get("taints") for s in cluster.slices(N1) for d in s["spec"].get("devices") or []}
    with node.xid_file.open("a") as f:
        f.write("1 13\n")  # a graphics engine exception: the application's fault
    kube.wait(
        "the plugin to log the ignored XID",
        lambda: "ignored (application error)" in node.plugin.log.read_text(),
    )
    after = {d["name"]: d.get("taints") for s in cluster.slices(N1) for d in s["spec"].get("devices") or []}
    assert after == before
