"""The planner: each rule, hysteresis, change limits, determinism; real slices, real allocator."""

from __future__ import annotations

import random

from support.partitioning import (
    NOW,
    allocated,
    claim,
    mig,
    node_slices,
    plan,
    plan_input,
    policy,
    soft,
    soft_or_whole,
    whole,
)

from driver import names
from driver.controller.planner import DEFERRED, FITS, HELPED, UNFIT, YOUNG, Planner, score_text


def _moves(p) -> list[tuple[str, int, str, str]]:
    return [(c.node, c.index, c.from_strategy, c.to_strategy) for c in p.changes]


def test_an_idle_soft_gpu_switches_to_mig_for_a_pending_mig_claim() -> None:
    c = claim(mig("3g.40gb"), name="wants-mig")
    p = plan(node_slices("n1", "2xA100-80GB", "soft"), [c])
    assert _moves(p) == [("n1", 0, "soft", "mig")]
    assert p.reasons == {"ns/wants-mig": HELPED}
    assert "ns/wants-mig" in p.changes[0].claims and "mig" in p.changes[0].reason


def test_nothing_changes_for_a_claim_that_fits_as_is() -> None:
    p = plan(node_slices("n1", "2xA100-80GB", "soft"), [claim(soft())])
    assert p.changes == [] and list(p.reasons.values()) == [FITS]


def test_a_gpu_with_an_allocated_claim_is_never_changed() -> None:
    slices = node_slices("n1", "1xA100-80GB", "soft")
    busy = allocated(claim(soft()), slices, "n1")
    p = plan(slices, [busy, claim(mig())])
    assert p.changes == [] and list(p.reasons.values()) == [UNFIT]


def test_the_idle_gpu_is_chosen_over_the_busy_one() -> None:
    slices = node_slices("n1", "2xA100-80GB", "soft")
    busy = allocated(claim(soft()), slices, "n1")  # lands on gpu-0
    assert busy["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    p = plan(slices, [busy, claim(mig())])
    assert _moves(p) == [("n1", 1, "soft", "mig")]


def test_a_paused_node_is_left_alone() -> None:
    paused = {"n1": {"metadata": {"name": "n1"}, "spec": {"paused": True, "gpus": []}}}
    p = plan(node_slices("n1", "1xA100-80GB", "soft"), [claim(mig())], partitionings=paused)
    assert p.changes == []


def test_only_allowed_strategies_are_used() -> None:
    only_soft = policy(nodes=[{"allowedStrategies": ["soft", "exclusive"], "defaultStrategy": "soft"}])
    p = plan(node_slices("n1", "1xA100-80GB", "soft"), [claim(mig())], only_soft)
    assert p.changes == [] and list(p.reasons.values()) == [UNFIT]


def test_the_first_matching_node_rule_applies() -> None:
    rules = policy(
        nodes=[
            {
                "nodeSelector": {"matchLabels": {"pool": "inference"}},
                "allowedStrategies": ["soft"],
                "defaultStrategy": "soft",
            },
            {"allowedStrategies": ["soft", "mig"], "defaultStrategy": "soft"},
        ]
    )
    slices = node_slices("a", "1xA100-80GB", "soft") + node_slices("b", "1xA100-80GB", "soft")
    p = plan(slices, [claim(mig())], rules, labels={"a": {"pool": "inference"}, "b": {}})
    assert _moves(p) == [("b", 0, "soft", "mig")]


def test_a_node_no_rule_matches_is_left_alone() -> None:
    rules = policy(nodes=[{"nodeSelector": {"matchLabels": {"pool": "x"}}}])
    p = plan(node_slices("n1", "1xA100-80GB", "soft"), [claim(mig())], rules)
    assert p.changes == []


def test_claims_of_isolated_namespaces_get_only_mig_or_exclusive_gpus() -> None:
    slices = node_slices("n1", "1xA100-80GB", "timeslice")
    allow = policy(
        nodes=[{"allowedStrategies": ["soft", "exclusive", "timeslice"], "defaultStrategy": "timeslice"}]
    )
    open_ns = plan(slices, [claim(soft_or_whole(), namespace="team")], allow)
    isolated = plan(
        slices, [claim(soft_or_whole(), namespace="tenant")], allow, isolated=frozenset({"tenant"})
    )
    assert _moves(open_ns) == [("n1", 0, "timeslice", "soft")]
    assert _moves(isolated) == [("n1", 0, "timeslice", "exclusive")]


def test_a_claim_of_several_gpus_changes_that_many() -> None:
    p = plan(node_slices("n1", "4xA100-80GB", "soft"), [claim(whole(2))])
    assert _moves(p) == [("n1", 0, "soft", "exclusive"), ("n1", 1, "soft", "exclusive")]


def test_a_later_claim_uses_the_gpu_an_earlier_change_made() -> None:
    first = claim(mig("1g.10gb"), created="2026-01-01T00:00:00Z")
    second = claim(mig("1g.10gb"), created="2026-01-01T00:00:05Z")
    p = plan(node_slices("n1", "2xA100-80GB", "soft"), [first, second])
    assert _moves(p) == [("n1", 0, "soft", "mig")]
    assert sorted(p.reasons.values()) == [FITS, HELPED]


def _with_history(times: list[float]) -> dict:
    import json

    slices = node_slices("n1", "1xA100-80GB", "soft")
    uuid = slices[0]["spec"]["devices"][0]["attributes"]["uuid"]["string"]
    return slices, {
        "n1": {
            "metadata": {
                "name": "n1",
                "annotations": {"carve.dev/strategy-changes": json.dumps({uuid: times})},
            },
            "spec": {"gpus": [{"index": 0, "strategy": "soft"}]},
        }
    }


def test_a_gpu_keeps_its_strategy_for_min_hold() -> None:
    slices, np = _with_history([NOW - 300])
    held = plan(slices, [claim(mig())], policy(hysteresis={"minHold": "10m"}), np)
    free = plan(slices, [claim(mig())], policy(hysteresis={"minHold": "4m"}), np)
    assert held.changes == [] and len(free.changes) == 1


def test_a_gpu_changes_at_most_max_changes_per_hour() -> None:
    slices, np = _with_history([NOW - 3000, NOW - 2000])
    capped = plan(slices, [claim(mig())], policy(hysteresis={"minHold": "0s", "maxChangesPerHour": 2}), np)
    more = plan(slices, [claim(mig())], policy(hysteresis={"minHold": "0s", "maxChangesPerHour": 3}), np)
    old = plan(
        slices,
        [claim(mig())],
        policy(hysteresis={"minHold": "0s", "maxChangesPerHour": 2}),
        np,
        now=NOW + 1800,
    )  # the first change left the hour
    assert capped.changes == [] and len(more.changes) == 1 and len(old.changes) == 1


def test_the_kept_share_of_each_node_is_never_changed() -> None:
    slices = node_slices("n1", "2xA100-80GB", "soft")
    busy = allocated(claim(soft()), slices, "n1")  # gpu-0; gpu-1 is the kept half
    p = plan(slices, [busy, claim(mig())], policy(hysteresis={"keepPercent": 50}))
    assert p.changes == []
    assert len(plan(slices, [claim(mig())], policy(hysteresis={"keepPercent": 50})).changes) == 1


def test_a_young_claim_gets_the_scheduler_s_chance_first() -> None:
    young = claim(mig(), created="2026-01-01T00:59:50Z")  # 10 s before NOW
    p = plan(node_slices("n1", "1xA100-80GB", "soft"), [young], grace_s=30)
    assert p.changes == [] and list(p.reasons.values()) == [YOUNG]


def test_changes_per_plan_are_capped() -> None:
    slices = node_slices("n1", "4xA100-80GB", "soft")
    inp = plan_input(slices, [claim(whole(1)) for _ in range(3)])
    capped = Planner().plan(type(inp)(**{**inp.__dict__, "max_changes": 2}))
    assert len(capped.changes) == 2 and sorted(capped.reasons.values()) == [DEFERRED, HELPED, HELPED]


def test_a_gpu_with_a_change_in_flight_is_not_changed_again() -> None:
    slices = node_slices("n1", "1xA100-80GB", "soft")
    in_flight = {
        "n1": {"metadata": {"name": "n1"}, "spec": {"gpus": [{"index": 0, "strategy": "exclusive"}]}}
    }
    assert plan(slices, [claim(mig())], partitionings=in_flight).changes == []


def test_the_plan_is_the_same_for_the_same_input_in_any_order() -> None:
    slices = (
        node_slices("a", "2xA100-80GB", "soft")
        + node_slices("b", "2xA100-80GB", "soft")
        + node_slices("c", "1xT4", "soft")
    )
    claims = [claim(mig("1g.10gb")), claim(whole(1)), claim(mig("7g.80gb")), claim(soft()), claim(whole(2))]
    first = plan(slices, claims)
    rng = random.Random(7)
    for _ in range(2):
        s, c = list(slices), list(claims)
        rng.shuffle(s)
        rng.shuffle(c)
        again = plan(s, c)
        assert again.changes == first.changes and again.reasons == first.reasons
    assert first.changes  # the case is not trivial


def test_an_idle_gpu_returns_to_the_default_once_nothing_waits() -> None:
    slices = node_slices("n1", "2xA100-80GB", {0: "exclusive", 1: "soft"})
    p = plan(slices, [])
    assert _moves(p) == [("n1", 0, "exclusive", "soft")]
    assert p.changes[0].claims == () and "default soft" in p.changes[0].reason


def test_no_consolidation_while_a_claim_is_young_or_the_gpu_is_held_or_busy() -> None:
    slices = node_slices("n1", "1xA100-80GB", "exclusive")
    young = claim(whole(1), created="2026-01-01T00:59:55Z")
    assert plan(slices, [young], grace_s=30).changes == []
    busy = allocated(claim(whole(1)), slices, "n1")
    assert plan(slices, [busy]).changes == []
    _, np = _with_history([NOW - 60])  # a soft GPU changed a minute ago; make it exclusive now
    exclusive = node_slices("n1", "1xA100-80GB", "exclusive")
    np["n1"]["spec"]["gpus"][0]["strategy"] = "exclusive"
    assert plan(exclusive, [], partitionings=np).changes == []


def test_an_idle_gpu_switches_to_mps_for_a_pending_mps_claim() -> None:
    wants = {
        "devices": {
            "requests": [
                {
                    "name": "g",
                    "exactly": {
                        "deviceClassName": "mps.carve.dev",
                        "capacity": {"requests": {"memory": "4Gi", "cores": "20"}},
                    },
                }
            ]
        }
    }
    allow = policy(nodes=[{"allowedStrategies": ["soft", "mps", "exclusive"], "defaultStrategy": "soft"}])
    p = plan(node_slices("n1", "1xT4", "soft"), [claim(wants, name="wants-mps")], allow)
    assert _moves(p) == [("n1", 0, "soft", "mps")]
    assert p.reasons == {"ns/wants-mps": HELPED}


def test_the_strategy_needing_the_fewest_gpus_wins_and_the_reason_carries_the_score() -> None:
    # Two whole GPUs or two 1g.10gb instances: listed whole first, but MIG needs one GPU, not two, so
    # the planner turns one idle GPU to mig (and says so with the score), leaving the other soft.
    sel = f'device.attributes["{names.DRIVER_NAME}"].profile == "1g.10gb"'
    two = {"devices": {"requests": [{"name": "g", "firstAvailable": [
        {"name": "whole", "deviceClassName": names.CLASS_GPU, "count": 2},
        {"name": "mig", "deviceClassName": names.CLASS_MIG, "count": 2,
         "selectors": [{"cel": {"expression": sel}}]},
    ]}]}}
    p = plan(node_slices("n1", "2xA100-80GB", "soft"), [claim(two, name="pair")])
    assert _moves(p) == [("n1", 0, "soft", "mig")]
    assert p.changes[0].reason.endswith(
        "score (GPUs an empty node needs for it): exclusive 2 GPUs, mig 1 GPU; won: mig")


def test_score_text_names_strategies_that_do_not_fit() -> None:
    assert score_text({"mig": None, "soft": 1}, "soft") == (
        "score (GPUs an empty node needs for it): mig -, soft 1 GPU; won: soft")


def test_a_claim_does_not_fit_on_a_gpu_tainted_no_execute() -> None:
    # The plugin taints a lost GPU NoExecute (--lost-taint-effect): a pending claim whose only candidate is
    # that GPU does not fit as is; the planner must not report it fits (and so leave it pending unseen).
    slices = node_slices("n1", "1xA100-80GB", "soft")
    for s in slices:
        for d in s["spec"].get("devices") or []:
            d["taints"] = [{"key": "gpu.carve.dev/lost", "value": "true", "effect": "NoExecute"}]
    p = plan(slices, [claim(soft(), name="pending")])
    assert p.reasons == {"ns/pending": UNFIT} and p.changes == []
    untainted = plan(node_slices("n1", "1xA100-80GB", "soft"), [claim(soft(), name="pending")])
    assert untainted.reasons == {"ns/pending": FITS}
