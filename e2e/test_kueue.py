"""Kueue queues Jobs that use carve claims (docs/kueue.md): a ClusterQueue whose quota counts carve's devices
(Kueue's DRA support: DeviceClass -> logical resource), admitting Jobs up to it, queueing the rest, and a
higher-priority Job preempting a lower one, whose claims go with its pods.

Kueue's manager runs beside the session's cluster (e2e/cluster/kueue.py), built by `make kueue`; a manager
that is not built fails these tests (never a skip)."""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from driver import names
from e2e import kube

KUEUE, KV = "kueue.x-k8s.io", "v1beta2"
# The logical resources a ClusterQueue's quota names, and carve's DeviceClasses each counts (one device of
# any listed class is one unit). Soft slices and their gates-off fallback, slots, are one resource.
WHOLE, SLICE = "carve.dev/gpu", "carve.dev/slice"
MAPPINGS = {WHOLE: [names.CLASS_GPU], SLICE: [names.CLASS_VGPU, names.CLASS_SLOT]}
QUOTA = {WHOLE: 1, SLICE: 2}
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def kueue(cluster):
    from e2e.cluster.kueue import Kueue, version
    from e2e.cluster.procs import StartError

    k = Kueue(cluster, cluster.root / "kueue", MAPPINGS)
    start = time.monotonic()
    try:
        k.start()
    except (StartError, OSError) as e:
        k.stop()
        pytest.fail(f"e2e: Kueue did not start (logs in {k.root / 'logs'}): {e}")
    print(f"\ne2e: Kueue {version()} up in {time.monotonic() - start:.1f}s (CRDs, manager ready, webhooks)")
    yield k
    k.stop()


@pytest.fixture
def queue(api, cluster, kueue, namespace):
    """A ResourceFlavor, a ClusterQueue with QUOTA of carve devices (preemption of lower priorities within
    it), a LocalQueue `lq` in the test's namespace, and two WorkloadPriorityClasses; all removed after."""
    custom = client.CustomObjectsApi(api)
    tag = uuid.uuid4().hex[:6]
    flavor, cq = f"carve-{tag}", f"carve-{tag}"
    low, high = f"carve-low-{tag}", f"carve-high-{tag}"
    custom.create_cluster_custom_object(KUEUE, KV, "resourceflavors", _obj("ResourceFlavor", flavor))
    for name, value in ((low, 10), (high, 1000)):
        custom.create_cluster_custom_object(
            KUEUE, KV, "workloadpriorityclasses", _obj("WorkloadPriorityClass", name, value=value)
        )
    spec = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {
                "coveredResources": list(QUOTA),
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [{"name": r, "nominalQuota": str(q)} for r, q in QUOTA.items()],
                    }
                ],
            }
        ],
    }
    custom.create_cluster_custom_object(KUEUE, KV, "clusterqueues", _obj("ClusterQueue", cq, spec=spec))
    custom.create_namespaced_custom_object(
        KUEUE, KV, namespace, "localqueues", _obj("LocalQueue", "lq", spec={"clusterQueue": cq})
    )
    kube.wait(
        f"ClusterQueue {cq} Active",
        lambda: (
            _condition(custom.get_cluster_custom_object(KUEUE, KV, "clusterqueues", cq), "Active") == "True"
        ),
        TIMEOUT_S,
    )
    yield {"cq": cq, "low": low, "high": high}
    batch = client.BatchV1Api(api)
    for job in batch.list_namespaced_job(namespace).items:
        batch.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
    kube.wait(f"jobs of {namespace} gone", lambda: not batch.list_namespaced_job(namespace).items, TIMEOUT_S)
    custom.delete_namespaced_custom_object(KUEUE, KV, namespace, "localqueues", "lq")
    custom.delete_cluster_custom_object(KUEUE, KV, "clusterqueues", cq)
    custom.delete_cluster_custom_object(KUEUE, KV, "resourceflavors", flavor)
    for name in (low, high):
        custom.delete_cluster_custom_object(KUEUE, KV, "workloadpriorityclasses", name)


def _obj(kind: str, name: str, **fields) -> dict:
    return {"apiVersion": f"{KUEUE}/{KV}", "kind": kind, "metadata": {"name": name}, **fields}


def _condition(obj: dict, kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"]
    return None


def _templates(api, namespace: str, gates_on: bool) -> None:
    whole = [{"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}}]
    kube.create(api, namespace, kube.template("whole", whole))
    kube.create(api, namespace, kube.template("slice", kube.soft_or_slot(gates_on)))


def _job(name: str, template: str, priority: str | None = None) -> dict:
    """A batch/v1 Job of one pod whose claim comes from `template`, in LocalQueue `lq`. It is created
    unsuspended: Kueue's webhook suspends it until its Workload is admitted."""
    labels = {QUEUE_LABEL: "lq"}
    if priority:
        labels[PRIORITY_LABEL] = priority
    pod = kube.pod(name, claim_template=template)["spec"]
    pod.pop("automountServiceAccountToken", None)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"backoffLimit": 0, "template": {"spec": pod}},
    }


def _workload(api, namespace: str, job: str) -> dict | None:
    batch = client.BatchV1Api(api)
    uid = batch.read_namespaced_job(job, namespace).metadata.uid
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        KUEUE, KV, namespace, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={uid}"
    )["items"]
    return items[0] if items else None


def _admitted(api, namespace: str, job: str) -> dict | None:
    wl = _workload(api, namespace, job)
    return wl if wl and _condition(wl, "Admitted") == "True" else None


def _pods(api, namespace: str, job: str) -> list[client.V1Pod]:
    return client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


def _running_with_claim(api, namespace: str, job: str) -> tuple[str, dict]:
    """The Job's one pod once Running, and its ResourceClaim (made from the Job's template, allocated)."""

    def running():
        pods = [p for p in _pods(api, namespace, job) if p.status.phase == "Running"]
        return pods[0] if pods else None

    pod = kube.wait(f"job {namespace}/{job}'s pod Running", running, TIMEOUT_S)
    claim = kube.claim_of(api, namespace, pod.metadata.name)
    assert kube.results(claim), f"{job}: claim {claim['metadata']['name']} is not allocated"
    return pod.metadata.name, claim


def _held_back(api, namespace: str, job: str) -> dict:
    """The Job's Workload, pending: no quota reserved, the Job suspended, no pod and so no claim."""
    wl = kube.wait(f"job {namespace}/{job}'s Workload", lambda: _workload(api, namespace, job), TIMEOUT_S)
    kube.wait(
        f"job {namespace}/{job}'s Workload pending for quota",
        lambda: _condition(_workload(api, namespace, job) or {}, "QuotaReserved") == "False",
        TIMEOUT_S,
    )
    wl = _workload(api, namespace, job)
    assert _condition(wl, "Admitted") != "True", wl["status"]
    assert client.BatchV1Api(api).read_namespaced_job(job, namespace).spec.suspend is True
    assert not _pods(api, namespace, job)
    return wl


def _usage(api, cq: str) -> dict[str, str]:
    obj = client.CustomObjectsApi(api).get_cluster_custom_object(KUEUE, KV, "clusterqueues", cq)
    flavors = (obj.get("status") or {}).get("flavorsUsage") or []
    return {r["name"]: r["total"] for f in flavors for r in f.get("resources") or []}


def _wait_usage(api, cq: str, want: dict[str, str], exact: bool = False) -> None:
    """Kueue writes a ClusterQueue's flavorsUsage in a status update of its own, after the admission a test
    waited for (CI once read 1 of 2 admitted slices): wait for the usage, naming the last one read."""
    seen: dict[str, dict[str, str]] = {}

    def reached() -> bool:
        seen["usage"] = usage = _usage(api, cq)
        return usage == want if exact else all(usage.get(k) == v for k, v in want.items())

    try:
        kube.wait(f"ClusterQueue {cq}'s usage {want}", reached, TIMEOUT_S)
    except AssertionError as e:
        raise AssertionError(f"{e}; usage read last: {seen.get('usage')}") from None


def _claim_gone(api, namespace: str, name: str) -> bool:
    try:
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            kube.GROUP, kube.VERSION, namespace, "resourceclaims", name
        )
    except client.ApiException as e:
        return e.status == 404
    return False


def test_cluster_queue_admits_carve_claims_up_to_quota_and_queues_the_rest(api, namespace, gates_on, queue):
    _templates(api, namespace, gates_on)
    batch = client.BatchV1Api(api)
    # One at a time, so which Job the quota admits is fixed: the first of each kind.
    for job, template in (("whole-1", "whole"), ("slice-1", "slice"), ("slice-2", "slice")):
        batch.create_namespaced_job(namespace, _job(job, template))
        wl = kube.wait(f"{job} admitted", lambda j=job: _admitted(api, namespace, j), TIMEOUT_S)
        resource = WHOLE if template == "whole" else SLICE
        usage = wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        assert usage.get(resource) == "1", f"{job}: Workload counts {usage}, not one {resource}"
        _, claim = _running_with_claim(api, namespace, job)
        (result,) = kube.results(claim)
        want = (
            names.CLASS_GPU if template == "whole" else (names.CLASS_VGPU if gates_on else names.CLASS_SLOT)
        )
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == want
        assert result["driver"] == names.DRIVER_NAME
    _wait_usage(api, queue["cq"], {WHOLE: "1", SLICE: "2"}, exact=True)

    # Over quota: queued by Kueue (suspended, no pod, no claim), though carve's devices could hold them.
    for job, template in (("whole-2", "whole"), ("slice-3", "slice")):
        batch.create_namespaced_job(namespace, _job(job, template))
        _held_back(api, namespace, job)
    custom = client.CustomObjectsApi(api)

    def counted():
        status = custom.get_cluster_custom_object(KUEUE, KV, "clusterqueues", queue["cq"]).get("status") or {}
        return (status.get("pendingWorkloads"), status.get("admittedWorkloads")) == (2, 3)

    # The ClusterQueue's status counts are refreshed after the Workloads' (Kueue batches them).
    kube.wait("ClusterQueue status: 2 pending, 3 admitted", counted, TIMEOUT_S)

    # Quota freed by a finished Job goes to the queued one of that resource.
    _, claim = _running_with_claim(api, namespace, "slice-1")
    batch.delete_namespaced_job("slice-1", namespace, propagation_policy="Foreground")
    kube.wait(
        "slice-1's claim deleted", lambda: _claim_gone(api, namespace, claim["metadata"]["name"]), TIMEOUT_S
    )
    kube.wait("slice-3 admitted", lambda: _admitted(api, namespace, "slice-3"), TIMEOUT_S)
    _running_with_claim(api, namespace, "slice-3")
    assert _condition(_workload(api, namespace, "whole-2"), "QuotaReserved") == "False"


def test_higher_priority_job_preempts_and_the_preempted_claims_are_released(api, namespace, gates_on, queue):
    _templates(api, namespace, gates_on)
    batch = client.BatchV1Api(api)
    claims = {}
    for job in ("low-1", "low-2"):
        batch.create_namespaced_job(namespace, _job(job, "slice", priority=queue["low"]))
        kube.wait(f"{job} admitted", lambda j=job: _admitted(api, namespace, j), TIMEOUT_S)
        _, claims[job] = _running_with_claim(api, namespace, job)
    _wait_usage(api, queue["cq"], {SLICE: "2"})

    batch.create_namespaced_job(namespace, _job("high", "slice", priority=queue["high"]))
    kube.wait("high admitted", lambda: _admitted(api, namespace, "high"), TIMEOUT_S)
    _, high_claim = _running_with_claim(api, namespace, "high")

    # Exactly one low Job was preempted: its Workload evicted for preemption, the Job suspended, its pod and
    # the claim made for that pod deleted (and so deallocated); the other low Job keeps its claim.
    def preempted():
        out = []
        for job in ("low-1", "low-2"):
            wl = _workload(api, namespace, job)
            if _condition(wl, "Preempted") == "True" or _condition(wl, "Evicted") == "True":
                out.append(job)
        return out

    (victim,) = kube.wait("a low Job preempted", preempted, TIMEOUT_S)
    (survivor,) = {"low-1", "low-2"} - {victim}
    wl = _workload(api, namespace, victim)
    reasons = {c["type"]: c.get("reason") for c in wl["status"]["conditions"]}
    assert reasons.get("Evicted") == "Preempted" or reasons.get("Preempted"), wl["status"]["conditions"]
    kube.wait(
        f"{victim}'s claim {claims[victim]['metadata']['name']} deleted",
        lambda: _claim_gone(api, namespace, claims[victim]["metadata"]["name"]),
        TIMEOUT_S,
    )
    kube.wait(f"{victim}'s pods gone", lambda: not _pods(api, namespace, victim), TIMEOUT_S)
    assert batch.read_namespaced_job(victim, namespace).spec.suspend is True
    # Requeued behind the quota the high Job now holds.
    kube.wait(
        f"{victim} pending again",
        lambda: _condition(_workload(api, namespace, victim), "QuotaReserved") == "False",
        TIMEOUT_S,
    )
    kept = client.CustomObjectsApi(api).get_namespaced_custom_object(
        kube.GROUP, kube.VERSION, namespace, "resourceclaims", claims[survivor]["metadata"]["name"]
    )
    assert kube.results(kept) == kube.results(claims[survivor])
    assert high_claim["metadata"]["name"] not in {c["metadata"]["name"] for c in claims.values()}
    _wait_usage(api, queue["cq"], {SLICE: "2"})


def test_kueue_refuses_a_claim_it_cannot_count(api, namespace, queue):
    """Kueue v0.17.0 counts devices per DeviceClass only: a template with a CEL selector (MIG profiles
    are picked that way) leaves the Workload inadmissible, with Kueue's own reason, rather than admitted
    with a wrong count."""
    kube.create(api, namespace, kube.template("mig", kube.mig_profile("1g.10gb")))
    client.BatchV1Api(api).create_namespaced_job(namespace, _job("mig", "mig"))

    def refused():
        wl = _workload(api, namespace, "mig")
        for c in ((wl or {}).get("status") or {}).get("conditions") or []:
            if c["status"] == "False" and "selectors" in (c.get("message") or ""):
                return c
        return None

    cond = kube.wait("the mig Job's Workload refused", refused, TIMEOUT_S)
    assert "CEL selectors are not supported" in cond["message"], cond
    assert not _pods(api, namespace, "mig")
