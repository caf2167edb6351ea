"""`--strategy auto`: run the trace under every layout the policy allows and keep the one that wins.

Candidates (driver/controller/score.py ranks them):
- every allowed strategy on every GPU the cluster file leaves open (`soft`, `mig`, ...);
- the reactive planner (driver/simulate/auto.py, the controller's own) starting from each allowed home
  strategy (`planner:soft`): idle GPUs change when a waiting pod fits only after a change;
- static splits: for each pair of allowed strategies, the first half of each open node group under one and
  the rest under the other (`split:mig/soft`), for workloads with mixed isolation needs.
Nodes the cluster file pins keep their strategy in every candidate. The winner's run is the `auto` result;
the others' figures come with it (`candidates`) for the report and the sizing answer.

This is the planner looking at the whole trace: what it would settle on once it has seen that workload.
A live controller sees the claims as they come; the figures are what the chosen layout gives.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver import names
from driver.controller.score import PLANNER_PREFIX, SPLIT_PREFIX, Outcome, choose
from driver.devices.catalog import fake_gpu
from driver.simulate.engine import SimResult
from driver.simulate.inputs import NodeGroup

# run(groups, strategy, policy) -> result; the caller binds trace, node policy and settings.
Runner = Callable[[list[NodeGroup], str, PartitioningPolicySpec], SimResult]


def outcome(name: str, r: SimResult) -> Outcome:
    return Outcome(candidate=name, peak_gpus=r.peak_gpus_busy, mean_wait_s=r.mean_wait_s,
                   mean_delay_s=r.mean_delay_s, p99_wait_s=r.p99_wait_s,
                   never_scheduled=r.pods_never_scheduled)


def _mig_ok(group: NodeGroup) -> bool:
    return all(fake_gpu(m, 0, "probe").mig_capable for m in group.models)


def _runnable(group: NodeGroup, strategy: str) -> str:
    """`mig` on a group with a GPU without MIG is `exclusive`, as under `--strategy mig`."""
    return names.STRATEGY_EXCLUSIVE if strategy == names.STRATEGY_MIG and not _mig_ok(group) else strategy


def _fixed(groups: list[NodeGroup], strategy: str) -> list[NodeGroup]:
    """Every open group under `strategy` (groups the file pins keep theirs)."""
    return [g if g.strategy is not None else dataclasses.replace(g, strategy=_runnable(g, strategy))
            for g in groups]


def _split(groups: list[NodeGroup], a: str, b: str) -> list[NodeGroup] | None:
    """The first half (rounded up) of each open group under `a`, the rest under `b`; None when that is
    no split at all (no open group of two nodes or more)."""
    out: list[NodeGroup] = []
    split = False
    for g in groups:
        if g.strategy is not None:
            out.append(g)
            continue
        first = (g.count + 1) // 2
        out.append(dataclasses.replace(g, name=f"{g.name}-{a}", count=first, strategy=_runnable(g, a)))
        if g.count - first:
            split = True
            out.append(dataclasses.replace(g, name=f"{g.name}-{b}", count=g.count - first,
                                           strategy=_runnable(g, b)))
    return out if split else None


def _home_policy(policy: PartitioningPolicySpec, home: str) -> PartitioningPolicySpec:
    data = policy.model_dump(by_alias=True)
    rules = data.get("nodes") or [{}]
    for rule in rules:
        rule["defaultStrategy"] = home
    data["nodes"] = rules
    return PartitioningPolicySpec.model_validate(data)


@dataclass(frozen=True)
class Candidate:
    name: str  # "soft", "planner:soft", "split:mig/soft"
    groups: list[NodeGroup]
    strategy: str  # what the run is given: a forced strategy, or auto (pinned groups, the planner)
    policy: PartitioningPolicySpec


def candidates(groups: list[NodeGroup], policy: PartitioningPolicySpec) -> list[Candidate]:
    """Every layout `auto` weighs, single strategies first (module doc)."""
    rule = policy.rule_for({})
    allowed = list(rule.allowed_strategies) if rule else [names.STRATEGY_SOFT]
    open_only = all(g.strategy is None for g in groups)
    out = [Candidate(s, groups, s, policy) if open_only else Candidate(s, _fixed(groups, s), "auto", policy)
           for s in allowed]
    out += [Candidate(PLANNER_PREFIX + home, groups, "auto", _home_policy(policy, home)) for home in allowed]
    for a, b in itertools.combinations(allowed, 2):
        layout = _split(groups, a, b)
        if layout is not None:
            out.append(Candidate(f"{SPLIT_PREFIX}{a}/{b}", layout, "auto", policy))
    return out


def run_auto(groups: list[NodeGroup], policy: PartitioningPolicySpec, run: Runner,
             known: dict[str, SimResult] | None = None) -> SimResult:
    """Every candidate's run, the winner's result relabelled `auto` with the choice and the others'
    figures. `known`: results of single strategies already run on the same groups (--compare)."""
    results: dict[str, SimResult] = {}
    for c in candidates(groups, policy):
        if known and c.name in known and c.strategy == c.name:
            results[c.name] = known[c.name]  # the same run as --strategy <name>
        else:
            results[c.name] = run(c.groups, c.strategy, c.policy)
    choice = choose(outcome(name, r) for name, r in results.items())
    won = results[choice.winner.candidate]
    return dataclasses.replace(
        won,
        strategy="auto",
        strategy_changes=won.strategy_changes or 0,
        planner_runs=won.planner_runs or 0,
        auto_choice=choice.winner.candidate,
        auto_why=choice.why,
        candidates=list(choice.ranked),
        candidate_results=results,
    )
