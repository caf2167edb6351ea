"""`--strategy auto`: run the trace under every layout the policy allows and keep the one that wins.

Candidates (driver/controller/score.py ranks them):
- every allowed strategy on every GPU the cluster file leaves open (`soft`, `mig`, ...);
- the reactive planner (driver/simulate/auto.py, the controller's own) starting from each allowed home
  strategy (`planner:soft`): idle GPUs change when a waiting pod fits only after a change;
- static splits: for each pair of allowed strategies, the first half of each open node group under one and
  the rest under the other (`split:mig/soft`), for workloads with mixed isolation needs;
- only when none of those is at or below the best single strategies on both peak GPUs and mean delay: a
  search over node-level mixes (`mix:soft/mig:3/30`: 3 of each 30 nodes under soft, the rest mig) and
  GPU-level ones (`mix-gpus:soft/mig:2/8`: on every node 2 GPUs soft, 6 mig), coarse to fine, until one
  is or the budget is spent (search_mixes).
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
from driver.controller.score import PLANNER_PREFIX, SPLIT_PREFIX, Outcome, choose, dominates, target
from driver.devices.catalog import fake_gpu
from driver.simulate.cluster import AUTO
from driver.simulate.engine import SimResult
from driver.simulate.inputs import NodeGroup

SEARCH_BUDGET = 48  # runs of search_mixes at most, spent only where no layout run so far wins both

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


def _divide(groups: list[NodeGroup], a: str, b: str,
            first_of: Callable[[int], int]) -> list[NodeGroup] | None:
    """The first `first_of(count)` nodes of each open group under `a`, the rest under `b` (groups the file
    pins keep theirs); None when that leaves every open group whole under one strategy (no mix at all)."""
    out: list[NodeGroup] = []
    mixed = False
    for g in groups:
        if g.strategy is not None:
            out.append(g)
            continue
        first = first_of(g.count)
        if first:
            out.append(dataclasses.replace(g, name=f"{g.name}-{a}", count=first, strategy=_runnable(g, a)))
        if g.count - first:
            out.append(dataclasses.replace(g, name=f"{g.name}-{b}", count=g.count - first,
                                           strategy=_runnable(g, b)))
        mixed = mixed or 0 < first < g.count
    return out if mixed else None


def _split(groups: list[NodeGroup], a: str, b: str) -> list[NodeGroup] | None:
    """The first half (rounded up) of each open group under `a`, the rest under `b`; None when that is
    no split at all (no open group of two nodes or more)."""
    return _divide(groups, a, b, lambda n: (n + 1) // 2)


def _mix(groups: list[NodeGroup], a: str, b: str, share: float) -> list[NodeGroup] | None:
    """`share` of the nodes of each open group (rounded) under `a`, the rest under `b`; None when that
    leaves every open group whole under one strategy (no mix at all)."""
    return _divide(groups, a, b, lambda n: min(n, max(0, round(n * share))))


def _mix_gpus(groups: list[NodeGroup], a: str, b: str, m: int) -> list[NodeGroup] | None:
    """On every node of each open group, the first `m` GPUs under `a` and the rest under `b` (a node of
    both kinds: its MIG GPUs and its soft GPUs); None when no open group has more than `m` GPUs."""
    out: list[NodeGroup] = []
    mixed = False
    for g in groups:
        if g.strategy is not None or len(g.models) <= m:
            out.append(g)
            continue
        per = tuple(_runnable(dataclasses.replace(g, models=(model,)), a if i < m else b)
                    for i, model in enumerate(g.models))
        label = f"{m}x{a}+{len(g.models) - m}x{b}"
        out.append(dataclasses.replace(g, name=f"{g.name}-{m}{a}", strategy=label, gpu_strategies=per))
        mixed = True
    return out if mixed else None


def _shares(n: int) -> list[tuple[int, int]]:
    """Fractions k/n (0 < k < n, n the largest open group's node count) in coarse-to-fine order: the
    quarters first, then eighths, ..., then every node count, each once (the half is `split:`)."""
    seen: set[int] = {n // 2} if n % 2 == 0 else {(n + 1) // 2}
    order: list[tuple[int, int]] = []
    parts = 4
    while True:
        for j in range(1, parts):
            k = round(n * j / parts)
            if 0 < k < n and k not in seen:
                seen.add(k)
                order.append((k, n))
        if parts >= n:
            break
        parts *= 2
    return order


def search_mixes(groups: list[NodeGroup], policy: PartitioningPolicySpec, run: Runner,
                 results: dict[str, SimResult], budget: int = SEARCH_BUDGET) -> None:
    """When no layout run so far is at or below the best single strategies on both peak GPUs and mean
    delay, look for one: mixes of each pair of allowed strategies, by node (k of n nodes under one, the
    rest under the other: `mix:a/b:k/n`) and by GPU (m of each node's GPUs: `mix-gpus:a/b:m/g`), coarse to
    fine, until one reaches that target or `budget` runs are spent. Adds every run to `results`.
    A greedy search, not an exhaustive one: when it finds nothing, auto's choice is the objective's
    (score.choose) and says "trade-off"."""
    outcomes = [outcome(name, r) for name, r in results.items()]
    try:
        peak, delay = target(outcomes)
    except ValueError:
        return
    fewest = min(o.never_scheduled for o in outcomes)
    if any(o.never_scheduled == fewest and dominates(o, peak, delay) for o in outcomes):
        return
    rule = policy.rule_for({})
    allowed = list(rule.allowed_strategies) if rule else [names.STRATEGY_SOFT]
    sizes = [g.count for g in groups if g.strategy is None]
    if not sizes or max(sizes) < 3:
        return
    # Pairs led by the strategies closest to the target (fewest peak GPUs, then least delay).
    by_single = {o.candidate: o for o in outcomes if o.single}
    ranked = sorted(allowed, key=lambda s: (by_single[s].peak_gpus, by_single[s].mean_delay_s)
                    if s in by_single else (1 << 30, 0.0))
    # Both orders of each pair: the scheduler's spreading breaks ties by node order, so 4 exclusive nodes
    # listed before 26 soft ones is another layout than 26 soft before 4 exclusive (issue 27's seed 3:
    # 186 GPUs / 324 s against 193 / 460 s).
    pairs = list(itertools.permutations(ranked, 2))
    per_node = max(len(g.models) for g in groups if g.strategy is None)
    # Node-level mixes (k of n nodes) and GPU-level ones (m of each node's GPUs) interleaved, each coarse
    # to fine; the even GPU split is a probe here (the half of the nodes is `split:`, run already).
    by_nodes = [("mix", a, b, k, n) for k, n in _shares(max(sizes)) for a, b in pairs]
    gpu_counts = sorted({m for m, _ in _shares(per_node)} | ({per_node // 2} if per_node >= 2 else set()),
                        key=lambda m: abs(2 * m - per_node))
    by_gpus = [("mix-gpus", a, b, m, per_node) for m in gpu_counts for a, b in pairs]
    probes = [p for pair in itertools.zip_longest(by_nodes, by_gpus) for p in pair if p is not None]
    losing: set[tuple[str, str, str]] = set()  # (kind, a, b) whose probe left pods unscheduled
    spent = 0
    for kind, a, b, k, n in probes:
        name = f"{kind}:{a}/{b}:{k}/{n}"
        if spent >= budget:
            break
        # A heuristic: what a GPU-level mix loses are jobs that need more GPUs of one kind than its
        # nodes then have (an 8-GPU training job on 8-GPU nodes); the pair's other GPU-level mixes, less
        # even than the first tried, lose them as well, so the budget goes to node-level mixes.
        if (kind, a, b) in losing:
            continue
        layout = _mix(groups, a, b, k / n) if kind == "mix" else _mix_gpus(groups, a, b, k)
        if layout is None or name in results:
            continue
        spent += 1
        results[name] = r = run(layout, "auto", policy)
        if r.pods_never_scheduled > fewest and kind == "mix-gpus":
            losing.add((kind, a, b))
        if r.pods_never_scheduled <= fewest and dominates(outcome(name, r), peak, delay):
            return


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
             known: dict[str, SimResult] | None = None, objective: str = "balanced",
             budget: int = SEARCH_BUDGET) -> SimResult:
    """Every candidate's run, the winner's result relabelled `auto` with the choice and the others'
    figures. `known`: results of single strategies already run on the same groups (--compare)."""
    results: dict[str, SimResult] = {}
    for c in candidates(groups, policy):
        if known and c.name in known and c.strategy == c.name:
            results[c.name] = known[c.name]  # the same run as --strategy <name>
        else:
            results[c.name] = run(c.groups, c.strategy, c.policy)
    search_mixes(groups, policy, run, results, budget)
    choice = choose((outcome(name, r) for name, r in results.items()), objective)
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


def layout_of(groups: list[NodeGroup], policy: PartitioningPolicySpec,
              name: str) -> tuple[list[NodeGroup], str | None]:
    """The node groups candidate `name` runs on, and the strategy its open GPUs (groups without one)
    start with: the forced strategy of a single, the home of `planner:<home>`, None where every group
    names its own. Raises ValueError for a name no candidate or search probe has."""
    for c in candidates(groups, policy):
        if c.name == name:
            if c.strategy != AUTO:
                return c.groups, c.strategy
            return c.groups, name[len(PLANNER_PREFIX):] if name.startswith(PLANNER_PREFIX) else None
    kind, _, rest = name.partition(":")
    try:
        pair, share = rest.split(":")
        a, b = pair.split("/")
        k, n = (int(x) for x in share.split("/"))
    except ValueError:
        raise ValueError(f"no candidate layout is named {name!r}") from None
    layout = _mix(groups, a, b, k / n) if kind == "mix" else _mix_gpus(groups, a, b, k)
    if kind not in ("mix", "mix-gpus") or layout is None:
        raise ValueError(f"no candidate layout is named {name!r}")
    return layout, None
