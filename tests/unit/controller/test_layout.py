"""The live controller's home layout comes from the simulator's portfolio (one model with `carve simulate
--strategy auto`): the claims it has seen become a trace, the portfolio's winner on the live nodes becomes
each GPU's home, and consolidation takes idle GPUs there with the winner's figures as the reason."""

from __future__ import annotations

from support.partitioning import NOW, claim, mig, node_slices, plan_input, soft

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.controller.layout import choose_layout, homes_of, node_groups
from driver.controller.observed import DEFAULT_DURATION_S, ClaimLog
from driver.controller.planner import Planner
from driver.devices import Settings
from driver.simulate.command import simulate
from driver.simulate.generator import generate
from driver.simulate.inputs import GenerateModel


def _owned(c: dict, pod: str) -> dict:
    c["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": f"u-{pod}"}]
    return c


def _allocated(c: dict) -> dict:
    return {**c, "status": {"allocation": {"devices": {"results": []}}}}


def test_the_claim_log_turns_the_claims_seen_into_a_trace() -> None:
    log = ClaimLog()
    a1 = _owned(claim(soft("4Gi", "20"), created="2026-01-01T00:00:00Z"), "a")
    a2 = _owned(claim(soft("8Gi", "30"), created="2026-01-01T00:00:10Z"), "a")
    b = _owned(claim(mig("1g.10gb"), created="2026-01-01T00:10:00Z"), "b")
    t0 = 1767225600.0  # 2026-01-01T00:00:00Z
    log.update([a1, a2, b], t0 + 700)
    log.update([_allocated(a1), _allocated(a2), b], t0 + 800)  # pod a placed
    log.update([b], t0 + 2600)  # pod a's claims gone: it ran 1,800 s
    trace = log.trace(t0 + 2600)
    assert [(p.name, p.arrival, p.duration, len(p.claims)) for p in trace] == [
        ("ns/a", 0.0, 1800.0, 2),  # one pod, both claims; arrival from the first claim's creation
        ("ns/b", 600.0, 1800.0, 1),  # pending: the median of the ended pods' run times
    ]


def test_the_claim_log_skips_malformed_claims_and_bounds_what_it_keeps() -> None:
    log = ClaimLog(window_s=100, max_pods=2)
    bad = claim(soft())
    bad["spec"] = {"devices": {"requests": ["not a request"]}}
    log.update([bad], NOW)
    assert log.trace(NOW) == []
    first = claim(soft())
    log.update([_allocated(first)], NOW)
    log.update([], NOW + 10)  # ended
    log.update([], NOW + 200)  # ended more than the window ago: dropped
    assert log.trace(NOW + 200) == []
    log.update([claim(soft()) for _ in range(3)], NOW + 300)
    assert len(log.trace(NOW + 300)) == 2
    assert {p.duration for p in log.trace(NOW + 300)} == {DEFAULT_DURATION_S}


def _nodes(count: int, spec: str = "4xA100-80GB") -> list:
    slices = [s for k in range(count) for s in node_slices(f"n{k}", spec, "soft")]
    return list(plan_input(slices, []).nodes)


def test_the_live_choice_is_the_simulators_auto_choice_on_the_same_claims() -> None:
    # One model: the live controller's layout on a trace equals `carve simulate --strategy auto` on the
    # same nodes and trace (the same candidates, simulation and rule), unless the reactive planner from
    # the policy's default does as well, which then stays (no change without a gain).
    policy = PartitioningPolicySpec()
    nodes = _nodes(4)
    for seed in (1, 10):
        pods = generate(GenerateModel(kind="inference-mix", pods=40, seed=seed, interarrival_s=300))
        layout = choose_layout(nodes, pods, policy, Settings(), budget=8)
        groups, _ = node_groups(nodes, policy)
        sim = simulate(groups, pods, "auto", budget=8)
        assert layout is not None
        if layout.choice == sim.auto_choice:
            assert layout.why == sim.auto_why
        else:
            assert layout.choice == "planner:soft" and "no change without a gain" in layout.why
            won, stay = sim.candidates[0], next(o for o in sim.candidates if o.candidate == "planner:soft")
            assert (won.peak_gpus, won.mean_delay_s) == (stay.peak_gpus, stay.mean_delay_s)
        assert set(layout.homes) == {"n0", "n1", "n2", "n3"}


def test_a_split_or_a_mix_maps_onto_the_live_nodes_in_name_order() -> None:
    policy = PartitioningPolicySpec()
    nodes = _nodes(4)
    groups, members = node_groups(nodes, policy)
    split = homes_of(groups, members, policy, "split:soft/mig")
    assert split == {"n0": dict.fromkeys(range(4), "soft"), "n1": dict.fromkeys(range(4), "soft"),
                     "n2": dict.fromkeys(range(4), "mig"), "n3": dict.fromkeys(range(4), "mig")}
    mix = homes_of(groups, members, policy, "mix-gpus:soft/mig:1/4")
    assert all(h == {0: "soft", 1: "mig", 2: "mig", 3: "mig"} for h in mix.values())
    planner = homes_of(groups, members, policy, "planner:exclusive")
    assert planner["n3"] == dict.fromkeys(range(4), "exclusive")


def test_nodes_with_pinned_gpus_or_unknown_models_are_left_out() -> None:
    nodes = _nodes(2)
    nodes[0].pinned.add(nodes[0].gpus[0].gpu.uuid)
    groups, members = node_groups(nodes, PartitioningPolicySpec())
    assert [g.count for g in groups] == [1] and [m.name for m in members[0]] == ["n1"]


def test_consolidation_takes_idle_gpus_to_the_portfolio_homes_and_says_why() -> None:
    inp = plan_input(node_slices("n1", "2xA100-80GB", "soft"), [])
    why = "portfolio: mig: peak 3 GPUs, mean delay 0.0 s (fewest GPUs and least delay)"
    homed = type(inp)(**{**inp.__dict__, "homes": {"n1": {0: "mig", 1: "soft"}}, "homes_why": why})
    plan = Planner().plan(homed)
    assert [(c.index, c.from_strategy, c.to_strategy) for c in plan.changes] == [(0, "soft", "mig")]
    assert plan.changes[0].reason.startswith("idle GPU to its home mig chosen by the portfolio")
    assert why in plan.changes[0].reason
    # A home the policy does not allow is not taken.
    only_soft = PartitioningPolicySpec.model_validate(
        {"nodes": [{"allowedStrategies": ["soft"], "defaultStrategy": "soft"}]})
    inp = plan_input(node_slices("n1", "2xA100-80GB", "soft"), [], policy=only_soft)
    homed = type(inp)(**{**inp.__dict__, "homes": {"n1": {0: "mig"}}, "homes_why": why})
    assert Planner().plan(homed).changes == []
