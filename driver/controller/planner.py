"""The strategy planner: which idle GPUs should run another strategy so pending claims can be allocated.

Pure: values in (node states built from ResourceSlices, DeviceClasses, allocated and pending claims,
NodePartitionings, the policy, the change history, now), a `Plan` out. Rules:
- Only GPUs with no allocated or prepared claim and no change in flight (`NodeState.busy`) change, and
  only on nodes that are not paused; a GPU the admin pinned (`NodeState.pinned`: a strategy rule naming
  it, the node annotation, a pinned NodePartitioning entry) never changes.
- A change is proposed only when carve's allocator says it lets a pending group of claims be allocated
  that could not be allocated anywhere before (each group is first tried on the cluster as it is; one that
  fits is expected to be placed by the scheduler and is recorded as such).
- Policy: the first node rule whose selector matches the node's labels gives the allowed strategies;
  claims of hardware-isolated namespaces are only helped with `mig` or `exclusive` GPUs; a GPU keeps its
  strategy at least `minHold` after a change and changes at most `maxChangesPerHour` times an hour;
  `keepPercent` of each node's GPUs (the highest indices) are never changed.
- Once a plan has made `max_changes` changes, the claims after are `deferred` to the next plan.
- Consolidation: once every waiting claim was looked at, idle GPUs return to their home strategy (the
  plugins' bare default rule when the policy allows it and the GPU can run it, else the node rule's
  default; hysteresis permitting), so a GPU switched for one claim does not stay that way for good.
- Deterministic: groups oldest first (ties by key), nodes by most busy GPUs then name, GPUs by index,
  strategies in the order the claim lists their device classes.
Incremental: a `Planner` keeps, across plans, the number of GPUs each claim shape needs on an empty node
of each model and strategy; within a plan, a shape that fits no node (as is, or after any change) is not
tried again, since a plan only ever fills the cluster further.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.partitioning import HARDWARE_ISOLATED, PartitioningPolicySpec
from driver import names
from driver.allocator import Allocator
from driver.controller.nodes import (
    CLASS_TYPES,
    SHARED,
    TYPES,
    NodeState,
    PublishedGpu,
    device_gpus,
    try_allocate,
)
from driver.devices import STRATEGIES, ModelError, Settings, build_slices
from driver.gpu.model import Gpu

HOUR_S = 3600.0

# Reasons a pending group is in, as the metrics and events name them.
FITS = "fits"  # fits as the cluster is: the scheduler will place it
HELPED = "helped"  # a change of this plan makes it fit
YOUNG = "young"  # pending for less than the grace period: the scheduler may still place it
UNFIT = "unfit"  # no allowed change of an idle GPU makes it fit
DEFERRED = "deferred"  # not looked at: this plan made its --max-changes already; the next plan will


@dataclass(frozen=True)
class Pending:
    """Claims that must be allocated together on one node (a pod's), pending since `since` (seconds)."""

    key: str  # "ns/name" of the claim (controller) or the pod (simulator)
    namespace: str
    claims: tuple[dict[str, Any], ...]
    since: float
    shape: str = ""  # what makes two groups alike; empty: the claims' specs (the simulator passes its own)


@dataclass(frozen=True)
class Change:
    node: str
    index: int
    uuid: str
    from_strategy: str
    to_strategy: str
    reason: str
    claims: tuple[str, ...]  # keys of the pending groups it is made for


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # pending key -> FITS | HELPED | YOUNG | UNFIT

    def pending_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.reasons.values()).items()))


@dataclass(frozen=True)
class PlanInput:
    nodes: Sequence[NodeState]
    classes: list[dict[str, Any]]
    pending: Sequence[Pending]
    policy: PartitioningPolicySpec
    now: float
    history: dict[str, list[float]] = field(default_factory=dict)  # GPU uuid -> times of its changes
    isolated_namespaces: frozenset[str] = frozenset()
    grace_s: float = 0.0
    max_changes: int = 64  # per plan
    known_unfit: bool = False  # the pending groups were just tried on these nodes (the simulator knows)
    consolidate: bool = True  # idle GPUs return to their node's default strategy (see _consolidate)
    # Homes chosen by the portfolio on the claims seen (layout.py): node -> GPU index -> strategy, and why.
    homes: dict[str, dict[int, str]] = field(default_factory=dict)
    homes_why: str = ""


def score_text(score: dict[str, int | None], chosen: str) -> str:
    """`score: mig 1 GPU, exclusive 1 GPU, soft -` for reasons, Events and `carve status`."""
    parts = [f"{s} {n} GPU{'s' if n != 1 else ''}" if n is not None else f"{s} -" for s, n in score.items()]
    return f"score (GPUs an empty node needs for it): {', '.join(parts)}; won: {chosen}"


def _shape(group: Pending, isolated: bool) -> str:
    base = group.shape or json.dumps([c.get("spec") for c in group.claims], sort_keys=True)
    return base + ("|iso" if isolated else "")


def claim_types(claims: Iterable[dict[str, Any]]) -> list[str] | None:
    """Device types the claims' requests name through carve's classes, in the order they are listed;
    None when some class is not one of carve's (it may select anything)."""
    out: list[str] = []
    for claim in claims:
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            alts = [req["exactly"]] if "exactly" in req else list(req.get("firstAvailable") or [])
            for alt in alts:
                t = CLASS_TYPES.get(alt.get("deviceClassName", ""))
                if t is None:
                    return None
                if t not in out:
                    out.append(t)
    return out


def _strategies_for(types: list[str] | None) -> list[str]:
    """Strategies that publish those types, in the claim's order (type gpu: exclusive before mig)."""
    if types is None:
        return [
            names.STRATEGY_EXCLUSIVE,
            names.STRATEGY_MIG,
            names.STRATEGY_SOFT,
            names.STRATEGY_SLOTS,
            names.STRATEGY_TIMESLICE,
            names.STRATEGY_MPS,
        ]
    out: list[str] = []
    for t in types:
        for s in (
            names.STRATEGY_EXCLUSIVE,
            names.STRATEGY_MIG,
            names.STRATEGY_SOFT,
            names.STRATEGY_SLOTS,
            names.STRATEGY_TIMESLICE,
            names.STRATEGY_MPS,
        ):
            if t in TYPES[s] and s not in out:
                out.append(s)
    return out


@dataclass
class _Memo:
    """What one plan learnt; node signatures stand for every node equal to the one tried."""

    unfit_shapes: set[str] = field(default_factory=set)
    misses: set[tuple[str, str]] = field(default_factory=set)  # (signature, shape): does not fit as is
    fits: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)  # ... fits, like so
    hopeless: set[tuple[str, str, str]] = field(default_factory=set)  # (signature, shape, strategy)
    helped: dict[tuple[str, str, str], tuple[set[int], list[dict[str, Any]]]] = field(default_factory=dict)
    changed: Counter[str] = field(default_factory=Counter)  # GPU uuid -> changes in this plan
    touched: set[str] = field(default_factory=set)  # nodes this plan changed


def _rebased(allocation: dict[str, Any], node: str) -> dict[str, Any]:
    """An allocation found on an equal node, moved to `node` (pool and node selector name it)."""
    out = json.loads(json.dumps(allocation))
    for r in out["devices"]["results"]:
        r["pool"] = node
    for term in (out.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            f["values"] = [node]
        for e in term.get("matchExpressions") or []:
            if e.get("key") == "kubernetes.io/hostname":
                e["values"] = [node]
    return out


class Planner:
    """Plans changes; keeps only caches that do not change a plan's outcome (see module doc)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self._need: dict[tuple[str, int, str, str], int | None] = {}
        self._empty: dict[tuple[str, int, str, int], tuple[list[dict[str, Any]], Allocator]] = {}

    # ---- what an empty node needs ----------------------------------------------------------------

    def need(
        self,
        pg: PublishedGpu,
        count: int,
        strategy: str,
        group: Pending,
        shape: str,
        classes: list[dict[str, Any]],
    ) -> int | None:
        """GPUs of `pg`'s model under `strategy` an empty node of `count` such GPUs needs for the group:
        the GPUs its allocation there touches (the allocator fills GPUs in order, so that is the fewest);
        None when it does not fit at all. One allocation per model, size, strategy and claim shape."""
        key = (pg.gpu.product, count, strategy, shape)
        if key not in self._need:
            self._need[key] = None
            try:
                STRATEGIES[strategy].check(pg.gpu)
            except ModelError:
                return None
            # Most claims fit one GPU; a claim of n devices may need n; only then try every GPU.
            for k in sorted({1, min(count, _devices_asked(group.claims)), count}):
                slices, allocator = self._pristine(pg, k, strategy, classes)
                got = try_allocate(allocator, "what-if", list(group.claims), keep=False)
                if got is not None:
                    parent = device_gpus(slices)
                    used = {
                        parent[r["device"]]
                        for a in got
                        for r in a["devices"]["results"]
                        if r["device"] in parent
                    }
                    self._need[key] = max(1, len(used))
                    break
        return self._need[key]

    def _pristine(self, pg: PublishedGpu, k: int, strategy: str, classes: list[dict[str, Any]]):
        """An empty node of k GPUs of pg's model under `strategy`, kept: allocations on it are tried and
        taken back, and its CEL results serve every claim shape asked about it."""
        key = (pg.gpu.product, k, strategy, id(classes))
        found = self._empty.get(key)
        if found is None:
            gpus = [_renumbered(pg, i) for i in range(k)]
            slices = build_slices(
                "what-if",
                gpus,
                {i: strategy for i in range(k)},
                self.settings,
                k8s_version="1.36",
                validate=False,
            )
            found = self._empty[key] = (slices, Allocator(slices, classes))
        return found

    # ---- the plan ----------------------------------------------------------------------------------

    def plan(self, inp: PlanInput) -> Plan:
        out = Plan()
        nodes = sorted(inp.nodes, key=lambda n: (-len(n.busy), n.name))
        memo = _Memo()
        for group in sorted(inp.pending, key=lambda g: (g.since, g.key)):
            if inp.now - group.since < inp.grace_s:
                out.reasons[group.key] = YOUNG
                continue
            if len(out.changes) >= inp.max_changes:
                out.reasons[group.key] = DEFERRED
                continue
            isolated = group.namespace in inp.isolated_namespaces
            shape = _shape(group, isolated)
            if shape in memo.unfit_shapes:
                out.reasons[group.key] = UNFIT
                continue
            types = claim_types(group.claims)
            # known_unfit: the groups did not fit the cluster as it was; a node this plan changed may.
            where = [n for n in nodes if n.name in memo.touched] if inp.known_unfit else nodes
            if where and self._fits_somewhere(where, group, shape, types, inp.classes, memo):
                out.reasons[group.key] = FITS
                continue
            made = self._change_for(nodes, group, shape, types, isolated, inp, memo)
            if made:
                out.changes.extend(made)
                out.reasons[group.key] = HELPED
                continue
            out.reasons[group.key] = UNFIT
            memo.unfit_shapes.add(shape)
        if inp.consolidate and not any(r in (YOUNG, DEFERRED) for r in out.reasons.values()):
            out.changes.extend(self._consolidate(nodes, inp, memo, len(out.changes)))
        return out

    def _consolidate(
        self, nodes: Sequence[NodeState], inp: PlanInput, memo: _Memo, made: int
    ) -> list[Change]:
        """Idle GPUs back to their node's default strategy once nothing waits for what they run: a GPU left
        `exclusive` (or `mig`) after the claim it changed for ended would otherwise hold a whole GPU per
        small pod from then on. Only when every waiting claim was looked at (none young or deferred): the
        ones that fit are booked on busy GPUs and the others fit nowhere either way, so no waiting claim
        loses its place. Hysteresis applies as to any change."""
        out: list[Change] = []
        for node in nodes:
            rule = inp.policy.rule_for(node.labels)
            if node.paused or rule is None:
                continue
            # Home: the plugins' bare default rule where the policy allows it and the GPU can run it (so
            # `plugin.strategy=mig` keeps every MIG GPU in MIG), else the policy's default.
            home = node.home if node.home in rule.allowed_strategies else None

            chosen = inp.homes.get(node.name, {})

            def target(
                p: PublishedGpu, home: str | None = home, fallback: str = rule.default_strategy,
                chosen: dict[int, str] = chosen, allowed: list[str] = rule.allowed_strategies,
            ) -> str:
                # The portfolio's home for this GPU first (same model as `carve simulate`), where the
                # policy allows it and the GPU can run it.
                mine = chosen.get(p.gpu.index)
                if mine is not None and mine in allowed and _can_run(p, mine):
                    return mine
                return home if home is not None and _can_run(p, home) else fallback

            back = [
                p
                for p in self._changeable(node, inp, memo.changed)
                if p.strategy != target(p) and _can_run(p, target(p))
            ]
            back = back[: max(0, inp.max_changes - made - len(out))]
            if not back:
                continue
            before = node.strategies
            node.apply({p.gpu.index: target(p) for p in back}, None)
            for p in back:
                memo.changed[p.gpu.uuid] += 1
                out.append(
                    Change(
                        node.name,
                        p.gpu.index,
                        p.gpu.uuid,
                        before[p.gpu.index],
                        target(p),
                        (f"idle GPU to its home {target(p)} chosen by the portfolio: no waiting claim "
                         f"needs {before[p.gpu.index]}; {inp.homes_why}"
                         if chosen.get(p.gpu.index) == target(p) and inp.homes_why else
                         f"idle GPU back to node {node.name}'s default {target(p)}: no waiting claim "
                         f"needs {before[p.gpu.index]}"),
                        (),
                    )
                )
        return out

    def _fits_somewhere(
        self,
        nodes: Sequence[NodeState],
        group: Pending,
        shape: str,
        types: list[str] | None,
        classes: list[dict[str, Any]],
        memo: _Memo,
    ) -> bool:
        for node in nodes:
            if types is not None and not (node.types() & set(types)):
                continue
            key = (node.signature(), shape)
            if key in memo.misses:
                continue
            known = memo.fits.get(key)
            if known is not None:  # an equal node took it: the same devices here
                got = [_rebased(a, node.name) for a in known]
                if node.allocator is not None:
                    for c, a in zip(group.claims, got, strict=True):
                        node.allocator.add_allocated({**c, "status": {"allocation": a}})
            else:
                got = try_allocate(node.current(classes), node.name, list(group.claims), keep=True)
            if got is not None:
                memo.fits[key] = got
                node.record(list(group.claims), got)
                return True
            memo.misses.add(key)
        return False

    def _score(self, node: NodeState, allowed: list[str], group: Pending, shape: str,
               classes: list[dict[str, Any]]) -> dict[str, int | None]:
        """The score of each allowed strategy for a pending group on `node`: GPUs of the node's model an
        empty node of its size needs for the group under it (None: it does not fit there at all). The
        planner tries the strategies fewest GPUs first, ties in the claim's own order (sorted is stable)."""
        if not node.gpus:
            return {}
        pg = node.gpus[0]
        count = sum(1 for p in node.gpus if p.gpu.product == pg.gpu.product)
        return {s: self.need(pg, count, s, group, shape, classes) for s in allowed}

    def _change_for(
        self,
        nodes: Sequence[NodeState],
        group: Pending,
        shape: str,
        types: list[str] | None,
        isolated: bool,
        inp: PlanInput,
        memo: _Memo,
    ) -> list[Change]:
        wanted = _strategies_for(types)
        if isolated:
            wanted = [s for s in wanted if s in HARDWARE_ISOLATED]
        for node in nodes:
            if node.paused:
                continue
            rule = inp.policy.rule_for(node.labels)
            if rule is None:
                continue
            candidates = self._changeable(node, inp, memo.changed)
            if not candidates:
                continue
            # Equal nodes give equal answers unless hysteresis held back some idle GPU of this one.
            comparable = len(candidates) == sum(1 for p in node.gpus if p.gpu.uuid not in node.busy)
            allowed = [s for s in wanted if s in rule.allowed_strategies]
            score = self._score(node, allowed, group, shape, inp.classes)
            for strategy in sorted(allowed, key=lambda s: (score.get(s) is None, score.get(s) or 0)):
                key = (node.signature(), shape, strategy)
                if comparable and key in memo.hopeless:
                    continue
                known = memo.helped.get(key) if comparable else None
                if known is not None:
                    indices, allocations = known
                    changed = [p for p in node.gpus if p.gpu.index in indices]
                    found = changed, None, [_rebased(a, node.name) for a in allocations]
                else:
                    found = self._grow(node, candidates, strategy, group, shape, inp.classes)
                if found is None:
                    if comparable:
                        memo.hopeless.add(key)
                    continue
                changed, allocator, allocations = found
                if comparable:
                    memo.helped[key] = ({p.gpu.index for p in changed}, allocations)
                before = node.strategies
                memo.touched.add(node.name)
                node.apply({p.gpu.index: strategy for p in changed}, allocator)
                node.record(list(group.claims), allocations)
                reason = (
                    f"pending {group.key} fits on node {node.name} once "
                    f"{len(changed)} idle GPU(s) run {strategy}; {score_text(score, strategy)}"
                )
                made = []
                for p in changed:
                    memo.changed[p.gpu.uuid] += 1
                    made.append(
                        Change(
                            node.name,
                            p.gpu.index,
                            p.gpu.uuid,
                            before[p.gpu.index],
                            strategy,
                            reason,
                            (group.key,),
                        )
                    )
                return made
        return []

    def _changeable(self, node: NodeState, inp: PlanInput, changes_made: Counter[str]) -> list[PublishedGpu]:
        """Idle, modelled GPUs outside the kept share that hysteresis lets change now."""
        h = inp.policy.hysteresis
        kept = math.floor(len(node.gpus) * h.keep_percent / 100)
        pool = node.gpus[: len(node.gpus) - kept] if kept else node.gpus
        out = []
        for p in pool:
            if (
                p.gpu.uuid in node.busy
                or p.gpu.uuid in node.pinned
                or not p.modelled
                or changes_made[p.gpu.uuid]
            ):
                continue
            times = inp.history.get(p.gpu.uuid, [])
            if times and inp.now - max(times) < h.min_hold_s:
                continue
            if sum(1 for t in times if inp.now - t < HOUR_S) >= h.max_changes_per_hour:
                continue
            out.append(p)
        return out

    def _grow(
        self,
        node: NodeState,
        candidates: list[PublishedGpu],
        strategy: str,
        group: Pending,
        shape: str,
        classes: list[dict[str, Any]],
    ):
        """Change the fewest candidates (lowest indices first) to `strategy` that let the group fit."""
        movable = [p for p in candidates if p.strategy != strategy and _can_run(p, strategy)]
        if not movable:
            return None
        same_model = [p for p in node.gpus if p.gpu.product == movable[0].gpu.product]
        needed = self.need(movable[0], len(same_model), strategy, group, shape, classes)
        if needed is None:
            return None
        idle_in = sum(1 for p in node.gpus if p.strategy == strategy and p.gpu.uuid not in node.busy)
        if idle_in + len(movable) < needed:
            return None  # not enough idle GPUs for what an empty node of this model needs
        shared_in = sum(
            1 for p in node.gpus if p.strategy == strategy and p.gpu.uuid in node.busy and strategy in SHARED
        )
        upto = max(1, needed - idle_in)
        for k in range(max(1, upto - shared_in), upto + 1):
            changed = movable[:k]
            allocator = node.what_if({p.gpu.index: strategy for p in changed}, classes)
            got = try_allocate(allocator, node.name, list(group.claims), keep=True)
            if got is not None:
                return changed, allocator, got
        return None


def _devices_asked(claims: Iterable[dict[str, Any]]) -> int:
    """Devices the claims ask for, counting each request's first alternative."""
    n = 0
    for claim in claims:
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            alts = [req["exactly"]] if "exactly" in req else list(req.get("firstAvailable") or [{}])
            n += int(alts[0].get("count") or 1)
    return n


def _can_run(p: PublishedGpu, strategy: str) -> bool:
    try:
        STRATEGIES[strategy].check(p.gpu)
    except ModelError:
        return False
    return True


def _renumbered(pg: PublishedGpu, i: int) -> Gpu:
    return dataclasses.replace(pg.gpu, index=i, minor=i, uuid=f"{pg.gpu.uuid}-what-if-{i}")
