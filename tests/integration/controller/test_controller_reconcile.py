"""`carve controller`'s reconciler against the API stand-in, through the real kubernetes client: informers
(list + watch), the planner, NodePartitioning writes, Events on the claims, and leader election."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from support.apiserver_standin import ApiServerStandIn
from support.partitioning import claim, mig, node_slices, soft

from driver.cluster.kube import KubeCluster
from driver.cluster.leader import LeaderElector, ObjectLeases
from driver.controller.reconcile import Reconciler, ReconcilerConfig
from driver.simulate.cluster import device_classes


def _wait(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def api(apiserver: ApiServerStandIn, tmp_path: Path) -> KubeCluster:
    return KubeCluster.from_config(apiserver.kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
def cluster(apiserver: ApiServerStandIn, api: KubeCluster) -> ApiServerStandIn:
    """One node, two soft A100s, carve's classes, the node and a namespace."""
    for s in node_slices("node-a", "2xA100-80GB", "soft"):
        api.create_resource_slice(s)
    for dc in device_classes():
        apiserver.put_object("deviceclasses", dc)
    apiserver.put_object(
        "nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "labels": {"pool": "gpu"}}},
    )
    apiserver.put_object("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    return apiserver


@pytest.fixture
def stop():
    event = threading.Event()
    yield event
    event.set()


def _reconciler(api: KubeCluster, stop: threading.Event, **config) -> Reconciler:
    r = Reconciler(api, ReconcilerConfig(grace_s=0, interval_s=60, **config))
    assert r.start_informers(stop, timeout_s=10)
    return r


def test_a_pending_mig_claim_gets_a_node_partitioning_and_an_event(cluster, api, stop) -> None:
    cluster.put_claim(claim(mig("3g.40gb"), name="wants-mig"))
    r = _reconciler(api, stop)
    plan = r.reconcile_once()
    assert [(c.node, c.index, c.to_strategy) for c in plan.changes] == [("node-a", 0, "mig")]
    stored = cluster.objects.get("nodepartitionings", "", "node-a")
    assert stored["spec"]["gpus"] == [{"index": 0, "strategy": "mig"}, {"index": 1, "strategy": "soft"}]
    assert "carve.dev/strategy-changes" in stored["metadata"]["annotations"]
    by_kind = {e["involvedObject"]["kind"]: e for e in cluster.objects.list("events")}
    assert sorted(by_kind) == ["Node", "ResourceClaim"]
    ev, on_node = by_kind["ResourceClaim"], by_kind["Node"]
    assert ev["involvedObject"]["name"] == "wants-mig" and ev["reason"] == "GPUStrategyChange"
    assert "node-a" in ev["message"] and "won: mig" in ev["message"]  # the score that won
    # ... and one on the Node, in `default`, for `kubectl describe node`
    assert on_node["involvedObject"]["kind"] == "Node" and on_node["involvedObject"]["name"] == "node-a"
    assert on_node["metadata"]["namespace"] == "default" and on_node["reason"] == "GPUStrategyChange"
    assert on_node["message"].startswith("GPU 0 soft->mig: pending ns/wants-mig fits on node node-a")
    assert "score (GPUs an empty node needs for it): mig 1 GPU; won: mig" in on_node["message"]
    reasons = json.loads(stored["metadata"]["annotations"]["carve.dev/strategy-reasons"])
    assert list(reasons) == ["0"] and reasons["0"].endswith("won: mig")


def test_a_change_in_flight_is_not_made_twice(cluster, api, stop) -> None:
    cluster.put_claim(claim(mig("3g.40gb"), name="wants-mig"))
    r = _reconciler(api, stop)
    r.reconcile_once()
    assert _wait(lambda: r.informers["nodepartitionings"].get("/node-a") is not None)
    again = r.reconcile_once()
    assert again.changes == [] and again.reasons == {"ns/wants-mig": "fits"}


def test_nothing_is_written_when_every_claim_fits(cluster, api, stop) -> None:
    cluster.put_claim(claim(soft(), name="small"))
    r = _reconciler(api, stop)
    assert r.reconcile_once().changes == []
    assert cluster.objects.list("nodepartitionings") == []


def test_watch_events_trigger_a_plan_without_relisting(cluster, api, stop) -> None:
    r = _reconciler(api, stop, debounce_s=0.05)
    threading.Thread(target=r.run, args=(stop,), daemon=True).start()
    assert _wait(lambda: r.last_plan is not None)
    cluster.put_claim(claim(mig("1g.10gb"), name="later"))
    assert _wait(lambda: cluster.objects.list("nodepartitionings") != [])
    assert all(i.lists == 1 for i in r.informers.values())  # watched, not listed again


def test_a_written_plan_survives_a_conflict_by_retrying(cluster, api, stop) -> None:
    cluster.put_claim(claim(mig("3g.40gb"), name="wants-mig"))
    cluster.fail_next("POST", "/apis/carve.dev/v1alpha1/nodepartitionings", code=500)
    r = _reconciler(api, stop)
    assert r.reconcile_once().changes  # planned, but the write failed
    assert cluster.objects.list("nodepartitionings") == [] and r.dirty.is_set()
    assert r.reconcile_once().changes
    assert cluster.objects.get("nodepartitionings", "", "node-a")["spec"]["gpus"][0]["strategy"] == "mig"


def test_the_policy_object_is_followed(cluster, api, stop) -> None:
    cluster.put_object(
        "partitioningpolicies",
        {
            "apiVersion": "carve.dev/v1alpha1",
            "kind": "PartitioningPolicy",
            "metadata": {"name": "default"},
            "spec": {"nodes": [{"allowedStrategies": ["soft", "exclusive"], "defaultStrategy": "soft"}]},
        },
    )
    cluster.put_claim(claim(mig("3g.40gb"), name="wants-mig"))
    r = _reconciler(api, stop)
    plan = r.reconcile_once()
    assert plan.changes == [] and plan.reasons == {"ns/wants-mig": "unfit"}


def test_two_replicas_take_turns_on_the_lease(apiserver, api) -> None:
    now = [1000.0]
    mono = [0.0]
    a = LeaderElector(
        ObjectLeases(api),
        "carve",
        "carve-controller",
        "a",
        lease_s=15,
        renew_s=5,
        clock=lambda: now[0],
        monotonic=lambda: mono[0],
    )
    b = LeaderElector(
        ObjectLeases(api),
        "carve",
        "carve-controller",
        "b",
        lease_s=15,
        renew_s=5,
        clock=lambda: now[0],
        monotonic=lambda: mono[0],
    )
    assert a.try_acquire() and a.is_leader
    assert not b.try_acquire() and not b.is_leader
    now[0] += 10
    mono[0] += 10
    assert not b.try_acquire()  # a renewed 10 s ago: its 15 s Lease still holds
    now[0] += 6  # 16 s since a's last renewal: the Lease has expired
    mono[0] += 6
    assert not a.is_leader  # a stopped acting before b could take over
    assert b.try_acquire() and b.is_leader
    lease = apiserver.objects.get("leases", "carve", "carve-controller")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    assert not a.try_acquire()


def test_a_field_selector_lists_and_watches_one_node_partitioning(apiserver, api) -> None:
    for name in ("node-a", "node-b"):
        api.create_object(
            "nodepartitionings",
            {
                "apiVersion": "carve.dev/v1alpha1",
                "kind": "NodePartitioning",
                "metadata": {"name": name},
                "spec": {"gpus": []},
            },
        )
    items, rv = api.list_objects("nodepartitionings", "metadata.name=node-b")
    assert [i["metadata"]["name"] for i in items] == ["node-b"]
    for name in ("node-a", "node-b"):
        obj = api.get_object("nodepartitionings", name)
        api.update_object("nodepartitionings", {**obj, "status": {"observedGeneration": 1}}, status=True)
    events = list(api.watch_objects("nodepartitionings", rv, 1, "metadata.name=node-b"))
    assert [(k, o["metadata"]["name"], o["status"]) for k, o in events] == [
        ("MODIFIED", "node-b", {"observedGeneration": 1})
    ]
    assert apiserver.requests[-1].query["fieldSelector"] == ["metadata.name=node-b"]


def test_the_event_also_goes_to_the_pod_the_claim_is_for(cluster, api, stop) -> None:
    c = claim(mig("3g.40gb"), name="llm-gpu-x1")
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "llm", "uid": "pod-uid-1", "controller": True}
    c["metadata"]["ownerReferences"] = [owner]
    cluster.put_claim(c)
    r = _reconciler(api, stop)
    assert [x.to_strategy for x in r.reconcile_once().changes] == ["mig"]
    events = sorted((e for e in cluster.objects.list("events") if e["involvedObject"]["kind"] != "Node"),
                    key=lambda e: e["involvedObject"]["kind"])
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events] == [
        ("Pod", "llm"),
        ("ResourceClaim", "llm-gpu-x1"),
    ]
    assert events[0]["involvedObject"]["uid"] == "pod-uid-1"
    assert events[0]["message"] == events[1]["message"] and "ns/llm-gpu-x1" in events[0]["message"]
    assert {e["metadata"]["namespace"] for e in events} == {"ns"}


def test_a_malformed_claim_gets_a_warning_event_once_and_the_others_are_planned(cluster, api, stop) -> None:
    bad = claim(mig("3g.40gb"), name="broken")
    bad["spec"]["devices"]["requests"] = "x"
    cluster.put_claim(bad)
    cluster.put_claim(claim(mig("3g.40gb"), name="wants-mig"))
    r = _reconciler(api, stop)
    plan = r.reconcile_once()
    assert [(c.node, c.index, c.to_strategy) for c in plan.changes] == [("node-a", 0, "mig")]
    r.reconcile_once()  # a second round does not repeat the Event for the same version of the claim
    warnings = [e for e in cluster.objects.list("events") if e["reason"] == "InvalidClaim"]
    assert [(e["involvedObject"]["name"], e["type"]) for e in warnings] == [("broken", "Warning")]
    expected = "ResourceClaim ns/broken: spec.devices.requests: expected a list, got str 'x'"
    assert warnings[0]["message"] == expected
    assert r.problems == [warnings[0]["message"]]


def test_the_home_layout_is_chosen_by_the_portfolio_once_enough_claims_were_seen(cluster, api, stop) -> None:
    for k in range(3):
        cluster.put_claim(claim(mig("1g.10gb"), name=f"iso-{k}"))
    off = _reconciler(api, stop, layout_min_pods=4)
    off.reconcile_once()
    assert off.layout is None and len(off.claim_log.trace(time.time())) == 3  # seen, not enough yet
    never = _reconciler(api, stop, layout_min_pods=1, layout_interval_s=0)
    never.reconcile_once()
    assert never.layout is None
    r = _reconciler(api, stop, layout_min_pods=3)
    r.reconcile_once()
    assert r.layout is not None and r.layout.pods == 3
    assert set(r.layout.homes) == {"node-a"} and set(r.layout.homes["node-a"]) == {0, 1}
    # Every one of the portfolio's homes is a strategy the default policy allows, and the winner's
    # figures are its reason.
    assert set(r.layout.homes["node-a"].values()) <= {"exclusive", "soft", "mig"}
    assert "peak" in r.layout.why and "mean delay" in r.layout.why
    first = r.layout
    r.reconcile_once()  # within the interval: kept, not chosen again
    assert r.layout is first
