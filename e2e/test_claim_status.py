"""Claim status and admin access on the real control plane: a prepared claim's status.devices read back
from the API server (written by the node's plugin under the chart's claims RBAC and admission policy), and
an admin pod that attaches to a GPU with a live soft claim without touching its quota."""

from __future__ import annotations

from kubernetes import client

from driver import names
from e2e import kube

N1 = "e2e-n1"
ADMIN_LABEL = "resource.kubernetes.io/admin-access"


def _claim(api, ns: str, name: str) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        kube.GROUP, kube.VERSION, ns, "resourceclaims", name
    )


def _run(api, ns, name, requests, node=N1):
    kube.create(api, ns, kube.template(name, requests))
    kube.create(api, ns, kube.pod(name, claim_template=name, node=node))
    kube.wait_running(api, ns, name)
    return kube.claim_of(api, ns, name)


def test_status_devices_are_written_after_prepare(cluster, api, namespace, gates_on):
    claim = _run(api, namespace, "seen", kube.soft_or_slot(gates_on))
    name = claim["metadata"]["name"]
    (result,) = kube.results(claim)
    entries = kube.wait(
        "the claim's status.devices",
        lambda: (_claim(api, namespace, name).get("status") or {}).get("devices"),
    )
    (entry,) = [e for e in entries if e["driver"] == names.DRIVER_NAME]
    assert (entry["pool"], entry["device"]) == (result["pool"], result["device"])
    assert entry.get("shareID") == result.get("shareID")
    conditions = {c["type"]: (c["status"], c["reason"]) for c in entry["conditions"]}
    assert conditions == {"Ready": ("True", "Prepared"), "Enforced": ("True", "Limiter")}
    data = entry["data"]
    assert data["gpuUUID"].startswith("GPU-") and data["memoryLimitBytes"] > 0
    assert data["strategy"] == ("vgpu" if gates_on else "slot")


def test_admin_pod_attaches_without_disturbing_the_tenants_quota(cluster, api, namespace, gates_on):
    node = cluster.nodes[N1]
    tenant = _run(api, namespace, "tenant", kube.soft_or_slot(gates_on))
    (r,) = kube.results(tenant)
    uid = tenant["metadata"]["uid"]
    spec_name = f"k8s.{names.DRIVER_NAME}-claim_{uid}.json"
    before = node.cdi_specs()[spec_name]
    gpu_uuid = next(
        d["attributes"]["uuid"]["string"]
        for s in cluster.slices(N1)
        for d in s["spec"].get("devices") or []
        if d["name"] == r["device"]
    )
    core = client.CoreV1Api(api)
    admin_ns = f"{namespace}-admin"
    core.create_namespace({"metadata": {"name": admin_ns, "labels": {ADMIN_LABEL: "true"}}})
    try:
        selector = {"cel": {"expression": f'device.attributes["{names.DRIVER_NAME}"].uuid == "{gpu_uuid}"'}}
        cls = names.CLASS_VGPU if gates_on else names.CLASS_SLOT
        request = [
            {"name": "gpu", "exactly": {"deviceClassName": cls, "adminAccess": True, "selectors": [selector]}}
        ]
        admin = _run(api, admin_ns, "peek", request)
        (a,) = kube.results(admin)
        assert a.get("adminAccess") is True
        spec = node.cdi_specs()[f"k8s.{names.DRIVER_NAME}-claim_{admin['metadata']['uid']}.json"]
        env = [
            e
            for d in [spec.get("containerEdits") or {}] + [x["containerEdits"] for x in spec["devices"]]
            for e in d.get("env") or []
        ]
        assert not any(e.startswith(("CARVE_MEMORY_LIMIT", "CARVE_REGION=")) for e in env), env
        assert node.cdi_specs()[spec_name] == before  # the tenant's limits as they were
        entries = kube.wait(
            "the admin claim's status.devices",
            lambda: (_claim(api, admin_ns, admin["metadata"]["name"]).get("status") or {}).get("devices"),
        )
        assert all(e["data"].get("adminAccess") is True for e in entries)
    finally:
        kube.delete_namespace(api, admin_ns)


def test_status_devices_are_cleared_at_unprepare(cluster, api, namespace, gates_on):
    """A standalone claim outlives its pod: the plugin's clear at unprepare (a write from the claim as the
    API server answered the status write, or a re-read when it went stale) removes our entry on the real
    API server, and the plugin logs no failed or conflicting report for it."""
    node = cluster.nodes[N1]
    kube.create(
        api,
        namespace,
        {
            "apiVersion": f"{kube.GROUP}/{kube.VERSION}",
            "kind": "ResourceClaim",
            "metadata": {"name": "kept"},
            "spec": {"devices": {"requests": kube.soft_or_slot(gates_on)}},
        },
    )
    kube.create(api, namespace, kube.pod("kept", claim="kept", node=N1))
    kube.wait_running(api, namespace, "kept")
    uid = _claim(api, namespace, "kept")["metadata"]["uid"]

    def ours() -> list[dict]:
        entries = (_claim(api, namespace, "kept").get("status") or {}).get("devices") or []
        return [e for e in entries if e["driver"] == names.DRIVER_NAME]

    kube.wait("the claim's status.devices entry of ours", ours)
    kube.delete_pod(api, namespace, "kept")
    kube.wait("our status.devices entry cleared", lambda: not ours())

    # The clear leaves the plugin within its report's wait (YIELD_S) of the unprepare: it logs the write,
    # unless the claim's deallocation (which drops its status.devices) came first and left nothing to clear.
    def cleared_or_deallocated() -> bool:
        if f"uid={uid}" in "".join(
            line for line in node.plugin.log.read_text().splitlines() if "claim-status.clear" in line
        ):
            return True
        return not (_claim(api, namespace, "kept").get("status") or {}).get("allocation")

    kube.wait("the plugin's clear of our entry, or the claim deallocated", cleared_or_deallocated)
    failed = [
        line
        for line in node.plugin.log.read_text().splitlines()
        if uid in line and ("claim-status.failed" in line or "claim-status.conflict" in line)
    ]
    assert not failed, failed
