"""From API objects to the planner's input and back: in-flight changes, bad objects, the history."""

from __future__ import annotations

import json

from support.partitioning import NOW, claim, mig, node_slices, plan, plan_input

from api.v1alpha1.partitioning import (
    ANNOTATION_CHANGES,
    ANNOTATION_REASONS,
    REASON_MAX,
    PartitioningPolicySpec,
    parse_node_partitioning,
    reasons_of,
)
from driver.controller.inputs import build_input, newest_pools, updated_partitioning
from driver.controller.planner import FITS, Change
from driver.simulate.cluster import device_classes


def test_a_claim_a_change_in_flight_was_made_for_fits_and_nothing_more_changes() -> None:
    slices = node_slices("n1", "2xA100-80GB", "soft")
    in_flight = {
        "n1": {
            "metadata": {"name": "n1"},
            "spec": {"gpus": [{"index": 0, "strategy": "mig"}, {"index": 1, "strategy": "soft"}]},
        }
    }
    p = plan(slices, [claim(mig("3g.40gb"))], partitionings=in_flight)
    assert p.changes == [] and list(p.reasons.values()) == [FITS]


def test_a_gpu_the_plugin_reports_waiting_is_busy() -> None:
    slices = node_slices("n1", "1xA100-80GB", "soft")
    waiting = {
        "n1": {
            "metadata": {"name": "n1"},
            "spec": {"gpus": [{"index": 0, "strategy": "soft"}]},
            "status": {
                "gpus": [
                    {
                        "index": 0,
                        "strategy": "soft",
                        "migMode": "Disabled",
                        "pending": "waiting for claim ns/a",
                    }
                ]
            },
        }
    }
    inp = plan_input(slices, [claim(mig())], partitionings=waiting)
    assert inp.nodes[0].busy == {inp.nodes[0].gpus[0].gpu.uuid}


def test_a_bad_node_partitioning_pauses_its_node_and_is_reported() -> None:
    slices = node_slices("n1", "1xA100-80GB", "soft")
    bad = {"n1": {"metadata": {"name": "n1"}, "spec": {"gpus": [{"strategy": "mig"}]}}}
    inp, problems = build_input(slices, device_classes(), [claim(mig())], bad, PartitioningPolicySpec(), NOW)
    assert inp.nodes[0].paused
    assert problems and problems[0].startswith("NodePartitioning n1: spec.gpus.0")


def test_only_the_newest_generation_of_a_pool_counts_once_complete() -> None:
    # As for the scheduler: a pool being republished (generation 2 not all written) is not planned on.
    old = node_slices("n1", "1xA100-80GB", "soft")
    new = [
        {
            **s,
            "metadata": {"name": s["metadata"]["name"] + "-new"},
            "spec": {**s["spec"], "pool": {**s["spec"]["pool"], "generation": 2, "resourceSliceCount": 2}},
        }
        for s in node_slices("n1", "1xA100-80GB", "mig")
    ]
    assert newest_pools(old + new)["n1"] == new
    assert newest_pools(old)["n1"] == old


def test_the_written_spec_names_every_gpu_keeps_paused_and_records_the_change() -> None:
    current = {
        "metadata": {
            "name": "n1",
            "resourceVersion": "7",
            "annotations": {"team": "x", ANNOTATION_CHANGES: json.dumps({"GPU-a": [NOW - 90000, NOW - 100]})},
        },
        "spec": {"paused": False, "gpus": [{"index": 1, "strategy": "soft", "splitCount": 4}]},
    }
    change = Change("n1", 0, "GPU-a", "soft", "mig", "why", ("ns/c",))
    obj = updated_partitioning("n1", current, [change], {0: "mig", 1: "soft"}, NOW)
    parsed = parse_node_partitioning(obj)
    assert [(g.index, g.strategy, g.split_count) for g in parsed.spec.gpus] == [
        (0, "mig", None),
        (1, "soft", 4),
    ]
    assert obj["metadata"]["resourceVersion"] == "7" and obj["metadata"]["annotations"]["team"] == "x"
    history = json.loads(obj["metadata"]["annotations"][ANNOTATION_CHANGES])
    assert history == {"GPU-a": [NOW - 100, NOW]}  # more than a day old: forgotten
    assert reasons_of(obj) == {"0": "why"}  # the change's reason, for kubectl carve status


def test_each_gpu_keeps_its_last_reason_and_a_gpu_no_longer_managed_loses_it() -> None:
    first = updated_partitioning("n1", None, [Change("n1", 0, "GPU-a", "soft", "mig", "for c1", ("ns/c1",)),
                                              Change("n1", 1, "GPU-b", "soft", "exclusive", "x" * 900, ())],
                                 {0: "mig", 1: "exclusive"}, NOW)
    assert reasons_of(first) == {"0": "for c1", "1": "x" * REASON_MAX}
    later = updated_partitioning("n1", first, [Change("n1", 1, "GPU-b", "exclusive", "soft", "back", ())],
                                 {1: "soft"}, NOW + 60)
    assert reasons_of(later) == {"1": "back"}
    broken = {"metadata": {"annotations": {ANNOTATION_REASONS: "{not json"}}}
    assert reasons_of(broken) == {}


def test_a_nodes_device_types_follow_its_busy_gpus_and_strategy_changes() -> None:
    from driver import names

    inp = plan_input(node_slices("n1", "2xA100-80GB", {0: "exclusive", 1: "soft"}), [])
    (node,) = inp.nodes
    assert node.types(idle_only=True) == {names.TYPE_GPU, names.TYPE_VGPU}
    node.busy.add(node.gpus[0].gpu.uuid)  # the exclusive GPU taken: no whole GPU left here
    assert node.types(idle_only=True) == {names.TYPE_VGPU} and node.types() == {names.TYPE_VGPU}
    node.apply({1: "timeslice"}, None)
    assert node.types() == {names.TYPE_TIMESLICE}
    node.busy.add(node.gpus[1].gpu.uuid)  # busy, but time-slices share: still offered, unless idle only
    assert node.types() == {names.TYPE_TIMESLICE} and node.types(idle_only=True) == frozenset()


def test_the_pods_a_claim_is_for_come_from_its_owner_and_its_reservations_once_each() -> None:
    from driver.controller.reconcile import claim_pods

    c = claim(mig("1g.10gb"))
    assert claim_pods(c) == []
    c["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u9"},
    ]
    c["status"] = {
        "reservedFor": [
            {"resource": "pods", "name": "p", "uid": "u1"},
            {"resource": "pods", "name": "q", "uid": "u2"},
            {"apiGroup": "example.com", "resource": "pods", "name": "x", "uid": "u3"},
        ]
    }
    assert claim_pods(c) == [("p", "u1"), ("q", "u2")]


def test_a_time_sliced_share_from_before_the_upgrade_is_named_as_uncounted() -> None:
    from support.partitioning import node_slices

    from driver.controller.inputs import uncounted_shares

    def held(uid: str, device: str, consumed: dict | None) -> dict:
        result = {"request": "g", "driver": "gpu.carve.dev", "pool": "n1", "device": device,
                  "shareID": f"{uid}-share"}
        if consumed is not None:
            result["consumedCapacity"] = consumed
        return {"metadata": {"name": uid, "namespace": "ns", "uid": uid},
                "status": {"allocation": {"devices": {"results": [result]}}}}

    now = node_slices("n1", "2xA100-80GB", "timeslice")  # publishes slots and memory
    claims = [held("old", "gpu-0", None), held("new", "gpu-1", {"slots": "1", "memory": "8Gi"})]
    lines = uncounted_shares(now, claims)
    assert len(lines) == 1 and lines[0].startswith("ResourceClaim ns/old: device n1/gpu-0: a share allocated")
    # Where the device publishes no capacity (1.34), nothing is uncounted: there is nothing to count.
    from driver.devices import build_slices
    from driver.devices.catalog import fake_node

    bare = build_slices("n1", fake_node("2xA100-80GB", "n1"), {0: "timeslice", 1: "timeslice"},
                        k8s_version="1.34")
    assert uncounted_shares(bare, claims) == []
