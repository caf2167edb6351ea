"""The live controller's home layout: which strategy each idle GPU goes back to, chosen by the same
portfolio as `carve simulate --strategy auto` (driver/simulate/portfolio.py, ranked by score.py) on the
claims the controller has seen (observed.py).

One model: the candidates (each allowed strategy everywhere, the reactive planner from each home, static
splits, the searched node- and GPU-level mixes), the simulation that runs them (the plugin's device model
and carve's allocator) and the rule that picks the winner are the simulator's own. What the controller
does with the winner: each GPU's home is its strategy in the winning layout (for `planner:<home>` and a
single strategy: that strategy), and consolidation (consolidate.py) returns idle GPUs to it, hysteresis
permitting; the reactive planner still changes idle GPUs for claims that fit nowhere. The reason written
for each such change carries the winner and its figures, so `kubectl carve status -o wide` shows the score
that won.

Nodes left out (they keep today's behaviour): paused ones, those with a pinned GPU, those with a GPU the
simulator has no model for, and those whose policy rule is not the cluster-wide one the portfolio
weighs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.controller.nodes import NodeState
from driver.controller.score import PLANNER_PREFIX
from driver.devices import Settings
from driver.devices.catalog import key_for_product
from driver.simulate.command import simulate_once
from driver.simulate.inputs import NodeGroup, SimulateError, TracePod
from driver.simulate.portfolio import layout_of, run_auto

LIVE_SEARCH_BUDGET = 16  # simulations the live controller spends on mixes per choice, at most


@dataclass(frozen=True)
class Layout:
    homes: dict[str, dict[int, str]] = field(default_factory=dict)  # node -> GPU index -> home strategy
    choice: str = ""  # the winning candidate ("soft", "planner:mig", "split:mig/soft", "mix:...")
    why: str = ""  # score.Choice.why: the winner's figures, the rule, the runners-up
    pods: int = 0  # trace pods it was chosen on


def node_groups(nodes: Sequence[NodeState],
                policy: PartitioningPolicySpec) -> tuple[list[NodeGroup], list[list[NodeState]]]:
    """The nodes the portfolio decides for, as simulator node groups of identical GPU models (names in
    order), and each group's nodes."""
    rule = policy.rule_for({})
    by_models: dict[tuple[str, ...], list[NodeState]] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        if rule is None or node.paused or node.pinned or not node.gpus:
            continue
        if policy.rule_for(node.labels) != rule:
            continue
        gpus = sorted(node.gpus, key=lambda p: p.gpu.index)
        models = tuple(key_for_product(p.gpu.product) for p in gpus)
        if any(m is None for m in models) or not all(p.modelled for p in gpus):
            continue
        by_models.setdefault(models, []).append(node)  # type: ignore[arg-type]
    groups = [NodeGroup(f"g{i}", len(members), models, None)
              for i, (models, members) in enumerate(by_models.items())]
    return groups, list(by_models.values())


def choose_layout(nodes: Sequence[NodeState], pods: list[TracePod], policy: PartitioningPolicySpec,
                  settings: Settings, objective: str = "balanced",
                  budget: int = LIVE_SEARCH_BUDGET, node_policy: str = "kube") -> Layout | None:
    """The portfolio's winner on `pods` over `nodes`, as homes per GPU; None when there is nothing to
    decide (no pods, no node the portfolio decides for). Raises SimulateError for a trace the simulator
    refuses (a claim it cannot read), with the pod named."""
    groups, members = node_groups(nodes, policy)
    if not groups or not pods:
        return None

    def one(layout: list[NodeGroup], strategy: str, pol: PartitioningPolicySpec):
        return simulate_once(layout, pods, strategy, node_policy, settings, "live cluster", "claims seen",
                             pol)

    result = run_auto(groups, policy, one, None, objective, budget)
    assert result.auto_choice is not None
    rule = policy.rule_for({})
    choice, why = result.auto_choice, result.auto_why or ""
    # No change without a gain: where the reactive planner from the policy's default (what the
    # controller does with no layout) does as well as the winner, it stays.
    stay = PLANNER_PREFIX + (rule.default_strategy if rule else "soft")
    won = result.candidates[0]
    same = next((o for o in result.candidates if o.candidate == stay), None)
    if same is not None and choice != stay and (same.never_scheduled, same.peak_gpus, same.mean_delay_s) == (
            won.never_scheduled, won.peak_gpus, won.mean_delay_s):
        choice, why = stay, f"{same.figures()} (as good as {won.candidate}: no change without a gain)"
    homes = homes_of(groups, members, policy, choice)
    return Layout(homes, choice, why, len(pods))


def homes_of(groups: list[NodeGroup], members: list[list[NodeState]], policy: PartitioningPolicySpec,
             choice: str) -> dict[str, dict[int, str]]:
    """Each node's GPU homes under candidate `choice` of the portfolio over `groups` (node_groups): the
    layout keeps the groups' order, each group split into consecutive parts, so its nodes are dealt out
    in name order."""
    layout, home = layout_of(groups, policy, choice)
    rule = policy.rule_for({})
    fallback = home or (rule.default_strategy if rule else "soft")
    homes: dict[str, dict[int, str]] = {}
    parts = iter(layout)
    for states in members:
        left = list(states)
        while left:
            part = next(parts)
            per = part.gpu_strategies or (part.strategy or fallback,) * len(part.models)
            for state in left[: part.count]:
                indices = sorted(p.gpu.index for p in state.gpus)
                homes[state.name] = dict(zip(indices, per, strict=True))
            left = left[part.count:]
    return homes


__all__ = ["LIVE_SEARCH_BUDGET", "Layout", "SimulateError", "choose_layout", "homes_of", "node_groups"]
