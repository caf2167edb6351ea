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
Laid out as: plan.py (the values), demand.py (what a group asks for), sizing.py (what an empty node
needs), hysteresis.py (which GPUs may change), consolidate.py (idle GPUs home); this module tries each
pending group in turn.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.partitioning import HARDWARE_ISOLATED
from driver.controller.consolidate import consolidate
from driver.controller.demand import claim_types, group_shape, strategies_for
from driver.controller.hysteresis import HOUR_S, can_run, changeable
from driver.controller.nodes import SHARED, NodeState, PublishedGpu, try_allocate
from driver.controller.plan import (
    DEFERRED,
    FITS,
    HELPED,
    UNFIT,
    YOUNG,
    Change,
    Pending,
    Plan,
    PlanInput,
    score_text,
)
from driver.controller.sizing import EmptyNodes
from driver.devices import Settings

# The planner's public names, wherever they are defined (callers import them from here).
__all__ = [
    "DEFERRED",
    "FITS",
    "HELPED",
    "HOUR_S",
    "UNFIT",
    "YOUNG",
    "Change",
    "Pending",
    "Plan",
    "PlanInput",
    "Planner",
    "claim_types",
    "score_text",
]


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
        self._empty = EmptyNodes(self.settings)

    def need(
        self,
        pg: PublishedGpu,
        count: int,
        strategy: str,
        group: Pending,
        shape: str,
        classes: list[dict[str, Any]],
    ) -> int | None:
        """GPUs of `pg`'s model under `strategy` an empty node of `count` such GPUs needs for the group
        (None: it does not fit at all); kept across plans (sizing.py)."""
        return self._empty.need(pg, count, strategy, group, shape, classes)

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
            shape = group_shape(group, isolated)
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
            out.changes.extend(consolidate(nodes, inp, memo.changed, len(out.changes)))
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
        wanted = strategies_for(types)
        if isolated:
            wanted = [s for s in wanted if s in HARDWARE_ISOLATED]
        for node in nodes:
            if node.paused:
                continue
            rule = inp.policy.rule_for(node.labels)
            if rule is None:
                continue
            candidates = changeable(node, inp, memo.changed)
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
        movable = [p for p in candidates if p.strategy != strategy and can_run(p, strategy)]
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

