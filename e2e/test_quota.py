"""Quotas on the real control plane (issue 28, docs/quota.md):

- upstream ResourceQuota on carve's DeviceClasses: `<class>.deviceclass.resource.k8s.io/devices` counts
  devices per class (the API server's own quota admission refuses the claim past it) and never capacity:
  two 60Gi soft slices count 2, as two 1Gi ones would;
- carve's namespace GPU budget: Namespace labels `budget.gpu.carve.dev/memory` and `.../cores`, enforced by
  the controller's validating webhook (the chart's configuration, e2e/controller_webhooks.py) on claims,
  on templates, and on the claims the resourceclaim controller makes from a pod's template; the refusal names
  namespace, class, request, use and what remains; the use shows in `carve status` and the controller's
  metrics.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from driver import names
from e2e import kube

G, V = "resource.k8s.io", "v1"
GI = 1 << 30
CARVE = str(Path(sys.executable).parent / "carve")


def share(memory: str, cores: str | None = None, cls: str = names.CLASS_VGPU) -> list[dict]:
    requests = {"memory": memory, **({"cores": cores} if cores else {})}
    return [{"name": "gpu", "exactly": {"deviceClassName": cls, "capacity": {"requests": requests}}}]


def claim(name: str, requests: list[dict]) -> dict:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": requests}},
    }


def refused(api, namespace: str, obj: dict) -> client.ApiException:
    with pytest.raises(client.ApiException) as e:
        kube.create(api, namespace, obj)
    assert e.value.status == 403, e.value.body
    return e.value


def claim_made(api, namespace: str, pod: str) -> dict | None:
    """The claim the resourceclaim controller made from the pod's template, once it has."""
    p = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    statuses = [s for s in p.status.resource_claim_statuses or [] if s.resource_claim_name]
    if not statuses:
        return None
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        G, V, namespace, "resourceclaims", statuses[0].resource_claim_name
    )


def message(e: client.ApiException) -> str:
    return json.loads(e.body)["message"]


# --- upstream ResourceQuota --------------------------------------------------------------------------------


def test_resourcequota_counts_carve_devices_per_class_not_capacity(api, namespace):
    hard = f"{names.CLASS_VGPU}.deviceclass.resource.k8s.io/devices"
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(
        namespace,
        {
            "metadata": {"name": "gpus"},
            "spec": {"hard": {hard: "2", "count/resourceclaims.resource.k8s.io": "5"}},
        },
    )
    # Quota admission refuses everything it governs until the quota controller has written the status.
    kube.wait(
        "the quota's status", lambda: core.read_namespaced_resource_quota("gpus", namespace).status.hard or {}
    )
    kube.create(api, namespace, claim("big-1", share("60Gi")))
    kube.create(api, namespace, claim("big-2", share("60Gi")))
    e = refused(api, namespace, claim("small", share("1Gi")))
    assert "exceeded quota: gpus" in message(e) and f"requested: {hard}=1" in message(e)
    assert f"used: {hard}=2" in message(e) and f"limited: {hard}=2" in message(e)
    # Whole GPUs are another class: not counted against the vgpu line.
    kube.create(
        api, namespace, claim("whole", [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}}])
    )

    def used():
        q = core.read_namespaced_resource_quota("gpus", namespace)
        return (q.status.used or {}).get(hard) == "2" and q.status.used

    assert kube.wait("the quota's use", used)["count/resourceclaims.resource.k8s.io"] == "3"


# --- carve's namespace budget ---------------------------------------------------------------------------


@pytest.fixture
def budgeted(api, namespace, webhooks):
    client.CoreV1Api(api).patch_namespace(
        namespace,
        {"metadata": {"labels": {names.BUDGET_MEMORY_LABEL: "4Gi", names.BUDGET_CORES_LABEL: "50"}}},
    )
    # The API server sends a namespace to the webhook once its namespace informer has the labels: until a
    # probe claim over every budget is refused, nothing below is checked.
    probe = claim("probe", share("64Gi"))

    def enforced():
        try:
            kube.create(api, namespace, probe)
        except client.ApiException as e:
            return e.status == 403
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            G, V, namespace, "resourceclaims", "probe"
        )
        return False

    kube.wait(f"the budget webhook on namespace {namespace}", enforced, timeout_s=30, every_s=1)
    return namespace


def capacity_dropped(api, ns: str, gates_on: bool) -> bool:
    """Without DRAConsumableCapacity (1.34/1.35 by default, `GATES=off`) the API server drops a request's
    `capacity` before admission, so a soft-slice claim reaches the webhook without memory: in a namespace
    with a memory budget it is refused naming that field (docs/quota.md). True when that was checked."""
    if gates_on:
        return False
    e = refused(api, ns, claim("no-capacity", share("1Gi", "10")))
    assert "spec.devices.requests[0].exactly.capacity.requests.memory: missing" in message(e), message(e)
    return True


def test_claims_over_the_namespace_budget_are_refused_naming_what_is_left(api, budgeted, webhooks, gates_on):
    ns = budgeted
    if capacity_dropped(api, ns, gates_on):
        kube.create(
            api, ns, claim("whole", [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}}])
        )
        return
    kube.create(api, ns, claim("a", share("3Gi", "30")))
    e = refused(api, ns, claim("b", share("2Gi")))
    assert (
        f"namespace {ns}: GPU memory budget exceeded: ResourceClaim b asks 2Gi (vgpu.carve.dev 1 x 2Gi at "
        "spec.devices.requests[0].exactly); 3Gi of 4Gi is in use by 1 claim(s), 1Gi remains "
        "(label budget.gpu.carve.dev/memory=4Gi)"
    ) in message(e), message(e)
    # Both budget webhooks check every budget of the namespace: whichever answers first refuses.
    assert 'admission webhook \\"memory.budget.gpu.carve.dev\\" denied' in e.body or (
        'admission webhook \\"cores.budget.gpu.carve.dev\\" denied' in e.body
    ), e.body
    e = refused(api, ns, claim("c", share("1Gi", "30")))
    assert f"namespace {ns}: GPU cores budget exceeded" in message(e) and "20% remains" in message(e)
    # MPS shares count too; whole GPUs do not.
    e = refused(api, ns, claim("m", share("2Gi", cls=names.CLASS_MPS)))
    assert "mps.carve.dev 1 x 2Gi" in message(e)
    kube.create(api, ns, claim("whole", [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}}]))
    e = refused(api, ns, claim("nomem", [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_VGPU}}]))
    assert "spec.devices.requests[0].exactly.capacity.requests.memory: missing" in message(e)
    kube.create(api, ns, claim("d", share("1Gi", "20")))  # exactly what is left


def test_templates_and_the_claims_made_from_them_are_held_to_the_budget(
    api, cluster, budgeted, webhooks, gates_on
):
    ns = budgeted
    if capacity_dropped(api, ns, gates_on):
        e = refused(api, ns, kube.template("t", share("1Gi")))
        assert "spec.spec.devices.requests[0].exactly.capacity.requests.memory: missing" in message(e)
        return
    e = refused(api, ns, kube.template("too-big", share("8Gi")))
    assert (
        "ResourceClaimTemplate too-big asks 8Gi per claim, over the namespace's whole budget of 4Gi"
        in message(e)
    )
    kube.create(api, ns, kube.template("t3", share("3Gi", "20")))
    kube.create(api, ns, kube.pod("first", claim_template="t3"))
    made = kube.wait("the first pod's claim", lambda: claim_made(api, ns, "first"))
    assert made["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] == "3Gi"
    kube.create(api, ns, kube.pod("second", claim_template="t3"))
    core = client.CoreV1Api(api)

    def refusal():
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=second").items
        return next((ev.message for ev in events if ev.reason == "FailedResourceClaimCreation"), None)

    text = kube.wait("the resourceclaim controller's event on the second pod", refusal)
    assert f"namespace {ns}: GPU memory budget exceeded" in text and "1Gi remains" in text, text
    assert not (core.read_namespaced_pod("second", ns).status.resource_claim_statuses or [])
    if gates_on:  # soft slices are published: the admitted pod really runs on its 3Gi share
        kube.wait_running(api, ns, "first")
        (r,) = kube.results(kube.claim_of(api, ns, "first"))
        assert r["consumedCapacity"]["memory"] == "3Gi"

    # The use shows where the platform team looks: `carve status` and the controller's metrics.
    done = subprocess.run(
        [
            CARVE,
            "status",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-n",
            ns,
            "-o",
            "json",
            "--no-discover-metrics",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    budgets = {b["resource"]: b for b in json.loads(done.stdout)["budgets"]}
    assert budgets["memory"]["used"] == 3 * GI and budgets["memory"]["limit"] == 4 * GI
    assert budgets["cores"]["used"] == 20 and budgets["cores"]["limit"] == 50
    table = subprocess.run(
        [CARVE, "status", "--kubeconfig", str(cluster.kubeconfig), "-n", ns, "--no-discover-metrics"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    rows = [line.split() for line in table.splitlines() if line.startswith(f"{ns} ")]
    assert ["memory", "3Gi", "4Gi", "1Gi", "1"] in [r[1:] for r in rows], table

    def exported():
        got = samples(webhooks.metrics())
        return got if got.get(("carve_namespace_memory_requested_bytes", ns)) == 3 * GI else None

    got = kube.wait("the controller's budget metrics", exported, timeout_s=30)
    assert got[("carve_namespace_memory_budget_bytes", ns)] == 4 * GI
    assert got[("carve_namespace_cores_requested_percent", ns)] == 20
    assert got[("carve_namespace_budget_denials_total", ns)] >= 1


def samples(text: str) -> dict[tuple[str, str], float]:
    """(series, namespace) -> value, denials summed over resources."""
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "namespace" in s.labels and s.name.startswith("carve_namespace_"):
                key = (s.name, s.labels["namespace"])
                out[key] = out.get(key, 0.0) + s.value
    return out
