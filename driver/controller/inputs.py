"""From API objects to the planner's input, and from a plan to NodePartitioning specs. Pure.

- Nodes: one per pool of carve's driver (pool name = node name), from the newest complete generation of
  its ResourceSlices; labels from the Node objects.
- Allocated claims belong to the node whose pool their results name; every GPU one of their devices
  belongs to is busy. So is a GPU whose NodePartitioning status says a change waits for it (`pending`),
  and a GPU whose desired strategy (spec) differs from what it publishes: the plugin has not applied it.
- Pending claims: no status.allocation, not being deleted; pending since the claim's creationTimestamp.
  Each is read once with the allocator's claim reader (driver/allocator/model.read_claim) before the
  planner sees it: a claim that does not have the shape of a ResourceClaim (`requests: "x"`,
  `matchAttribute: 5`) is a problem naming that claim and field, and is left out; the round goes on.
- History: the controller keeps the times it changed each GPU in the annotation
  `carve.dev/strategy-changes` of the node's NodePartitioning ({"<uuid>": [unix seconds, ...]}).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from api.v1alpha1.partitioning import (
    ANNOTATION_CHANGES,
    ANNOTATION_REASONS,
    REASON_MAX,
    GpuPartition,
    NodePartitioning,
    NodePartitioningSpec,
    PartitioningError,
    PartitioningPolicySpec,
    node_partitioning_object,
    parse_node_partitioning,
    reasons_of,
)
from driver import names
from driver.allocator.model import ModelError, object_name, read_claim
from driver.controller.nodes import NodeState, claim_devices, device_gpus, gpus_from_slices
from driver.controller.planner import Change, Pending, PlanInput
from driver.devices import Settings
from driver.devices.rules import SOURCE_PINNED, RuleError, StrategyRules, parse_rules, resolve

KEEP_HISTORY_S = 86400.0  # change times older than a day matter to no hysteresis setting


def parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.strptime(text.rstrip("Z")[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()


def claim_problem(claim: dict[str, Any]) -> str:
    """Why a pending claim cannot be planned for ("" when it can), naming the claim and the field."""
    try:
        read_claim(claim)
    except ModelError as e:
        return str(e)
    except (AttributeError, KeyError, TypeError, ValueError, RecursionError) as e:  # a shape not foreseen
        return f"ResourceClaim {object_name(claim)}: malformed: {type(e).__name__}: {e}"
    return ""


def newest_pools(slices: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """node -> slices of the newest generation of its pool (only complete pools)."""
    pools: dict[str, list[dict[str, Any]]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != names.DRIVER_NAME or not spec.get("nodeName"):
            continue
        pools.setdefault((spec.get("pool") or {}).get("name") or spec["nodeName"], []).append(s)
    out = {}
    for pool, members in pools.items():
        gen = max((m["spec"]["pool"].get("generation", 0) for m in members), default=0)
        newest = [m for m in members if m["spec"]["pool"].get("generation", 0) == gen]
        if all(m["spec"]["pool"].get("resourceSliceCount", 1) == len(newest) for m in newest):
            out[pool] = sorted(newest, key=lambda m: m["metadata"]["name"])
    return out


def uncounted_shares(slices: Iterable[dict[str, Any]], claims: Iterable[dict[str, Any]]) -> list[str]:
    """Claims holding a share of a device that publishes capacity, with no consumedCapacity recorded: a
    time-sliced claim allocated before carve published `slots`/`memory` on time-sliced GPUs (or on 1.34,
    which publishes none). The scheduler charges such a share nothing (kubernetes v1.37.2,
    dynamicresources/allocateddevices.go: consumed capacity is counted only when the result has it), so
    its GPU can take split-count sharers besides it until it ends. One line per claim, naming it and the
    device."""
    capacity: set[tuple[str, str]] = set()
    for pool, members in newest_pools(slices).items():
        for s in members:
            for d in (s.get("spec") or {}).get("devices") or []:
                if d.get("allowMultipleAllocations") and d.get("capacity"):
                    capacity.add((pool, d.get("name", "")))
    out = []
    for claim in claims:
        results = ((((claim.get("status") or {}).get("allocation") or {}).get("devices") or {})
                   .get("results") or [])
        for r in results:
            if not isinstance(r, dict) or r.get("driver") != names.DRIVER_NAME:
                continue
            where = (r.get("pool"), r.get("device"))
            if r.get("shareID") and not r.get("consumedCapacity") and where in capacity:
                out.append(f"ResourceClaim {object_name(claim)}: device {where[0]}/{where[1]}: a share "
                           "allocated before the device published capacity holds none: the scheduler counts "
                           "nothing for it, so the GPU may take split-count sharers besides it until it ends")
    return out


def history_of(obj: dict[str, Any] | None) -> dict[str, list[float]]:
    raw = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(ANNOTATION_CHANGES)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): [float(t) for t in v] for k, v in data.items()}
    except (ValueError, TypeError, AttributeError):
        return {}  # a hand-edited annotation only loses the hysteresis memory


def build_input(
    slices: Iterable[dict[str, Any]],
    classes: list[dict[str, Any]],
    claims: Iterable[dict[str, Any]],
    partitionings: dict[str, dict[str, Any]],
    policy: PartitioningPolicySpec,
    now: float,
    node_labels: dict[str, dict[str, str]] | None = None,
    isolated_namespaces: frozenset[str] = frozenset(),
    settings: Settings | None = None,
    grace_s: float = 0.0,
    plugin_rules: StrategyRules | None = None,
    node_annotations: dict[str, dict[str, str]] | None = None,
    invalid: list[tuple[dict[str, Any], str]] | None = None,
) -> tuple[PlanInput, list[str]]:
    """The planner's input, and the problems found (a bad NodePartitioning pauses its node, a malformed
    claim is left out; each such claim is also appended to `invalid` with its message, for Events).

    Pinned GPUs (never changed): those a rule of `plugin_rules` (the plugins' --strategy) names by index or
    model, those the node annotation gpu.carve.dev/strategy gives a strategy, the NodePartitioning entries
    marked `pinned: true`, and those whose NodePartitioning status says `source: pinned` (the plugin knows
    its own rules best)."""
    problems: list[str] = []
    settings = settings or Settings()
    nodes: dict[str, NodeState] = {}
    gpu_of: dict[str, dict[str, str]] = {}
    history: dict[str, list[float]] = {}
    for node, members in sorted(newest_pools(slices).items()):
        state = NodeState(
            name=node,
            gpus=gpus_from_slices(node, members),
            labels=(node_labels or {}).get(node, {}),
            settings=settings,
            slices=members,
        )
        gpu_of[node] = device_gpus(members)
        _pin_by_rules(state, plugin_rules, (node_annotations or {}).get(node, {}), problems)
        obj = partitionings.get(node)
        if obj is not None:
            try:
                np = parse_node_partitioning(obj)
                state.paused = np.spec.paused
                _pin_by_partitioning(np, state)
                _in_flight(np, state)
            except PartitioningError as e:
                problems.append(str(e))
                state.paused = True
            history.update(history_of(obj))
        nodes[node] = state
    pending: list[Pending] = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        if not isinstance(meta, dict) or meta.get("deletionTimestamp"):
            continue
        if (claim.get("status") or {}).get("allocation"):
            try:
                held = claim_devices(claim)
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                problems.append(f"ResourceClaim {object_name(claim)}: status.allocation: malformed: {e}")
                continue
            for pool, device in held:
                if pool in nodes:
                    nodes[pool].allocated[
                        meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
                    ] = claim
                    gpu = gpu_of[pool].get(device)
                    if gpu:
                        nodes[pool].busy.add(gpu)
            continue
        message = claim_problem(claim)
        if message:
            problems.append(message)
            if invalid is not None:
                invalid.append((claim, message))
            continue
        pending.append(
            Pending(
                f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                meta.get("namespace", ""),
                (claim,),
                parse_time(meta.get("creationTimestamp")),
            )
        )
    inp = PlanInput(
        nodes=list(nodes.values()),
        classes=classes,
        pending=pending,
        policy=policy,
        now=now,
        history=history,
        isolated_namespaces=isolated_namespaces,
        grace_s=grace_s,
    )
    return inp, problems


def _pin_by_rules(
    state: NodeState, rules: StrategyRules | None, annotations: dict[str, str], problems: list[str]
) -> None:
    """The GPUs the plugins' rules or the node annotation pin, and the node's home strategy."""
    annotation = None
    text = annotations.get(names.ANNOTATION_STRATEGY)
    if text is not None:
        try:
            annotation = parse_rules(text, f"Node {state.name} annotation {names.ANNOTATION_STRATEGY}", True)
        except RuleError as e:
            problems.append(str(e))  # the plugin ignores it too (and says so in a Node Event)
    empty = StrategyRules((), None, "")
    for p in state.gpus:
        if resolve([p.gpu], rules or empty, annotation)[p.gpu.index].pinned:
            state.pinned.add(p.gpu.uuid)
    if rules is not None and rules.default is not None:
        state.home = rules.default.strategy


def _pin_by_partitioning(np: NodePartitioning, state: NodeState) -> None:
    """Entries the admin wrote (`pinned: true`) and GPUs the plugin reports pinned."""
    by_index = {p.gpu.index: p.gpu.uuid for p in state.gpus}
    uuids = set(by_index.values())
    for entry in np.spec.gpus:
        if entry.pinned:
            uuid = by_index.get(entry.index) if entry.index is not None else entry.uuid
            if uuid in uuids:
                state.pinned.add(uuid)
    for g in np.status.gpus if np.status else []:
        if g.source == SOURCE_PINNED and g.index in by_index:
            state.pinned.add(by_index[g.index])


def _in_flight(np: NodePartitioning, state: NodeState) -> None:
    """GPUs whose desired strategy is not yet what they publish, or whose status reports a wait, are busy;
    the planner sees the former as they will be (their desired strategy), so the claims a change was made
    for fit there and no second change is made for them."""
    desired = np.desired()
    ahead: dict[int, str] = {}
    for p in state.gpus:
        want = desired.get(p.gpu.index) or desired.get(p.gpu.uuid)
        if want is not None and want.strategy != p.strategy and p.modelled:
            state.busy.add(p.gpu.uuid)
            ahead[p.gpu.index] = want.strategy
    for g in np.status.gpus if np.status else []:
        if g.pending:
            state.busy.update(p.gpu.uuid for p in state.gpus if p.gpu.index == g.index)
    if ahead:
        state.gpus = [dataclasses.replace(p, strategy=ahead.get(p.gpu.index, p.strategy)) for p in state.gpus]
        state.slices = None  # built from the model, with the changes in flight


def updated_partitioning(
    node: str, current: dict[str, Any] | None, changes: list[Change], strategies: dict[int, str], now: float
) -> dict[str, Any]:
    """The NodePartitioning to write for `node`: every GPU's strategy as planned (`strategies`: the GPUs
    the controller manages), the entries the admin pinned exactly as written, and the change history (the
    last hour, for maxChangesPerHour) in the annotation. Keeps the object's paused flag, resourceVersion
    and other annotations."""
    meta = (current or {}).get("metadata") or {}
    old_spec = (current or {}).get("spec") or {}
    layouts = {g.get("index"): g for g in old_spec.get("gpus") or []}
    pinned = [g for g in old_spec.get("gpus") or [] if g.get("pinned") is True]
    pinned_indices = {g.get("index") for g in pinned}
    entries = [GpuPartition.model_validate(g) for g in pinned]
    for index, strategy in sorted(strategies.items()):
        if index in pinned_indices:
            continue
        kept = layouts.get(index) or {}
        extra = {}
        if kept.get("strategy") == strategy:  # an unchanged GPU keeps its layout / split count
            extra = {k: kept[k] for k in ("migLayout", "splitCount") if k in kept}
        entries.append(GpuPartition.model_validate({"index": index, "strategy": strategy, **extra}))
    entries.sort(key=lambda e: (e.index is None, e.index or 0, e.uuid or ""))
    spec = NodePartitioningSpec(gpus=entries, paused=bool(old_spec.get("paused", False)))
    history = history_of(current)
    for c in changes:
        history.setdefault(c.uuid, []).append(now)
    history = {u: sorted(t for t in ts if now - t < KEEP_HISTORY_S) for u, ts in sorted(history.items())}
    reasons = reasons_of(current)
    for c in changes:
        reasons[str(c.index)] = c.reason[:REASON_MAX]
    reasons = {i: r for i, r in reasons.items() if i.isdigit() and int(i) in strategies}
    annotations = {
        **(meta.get("annotations") or {}),
        ANNOTATION_CHANGES: json.dumps({u: ts for u, ts in history.items() if ts}, sort_keys=True),
        ANNOTATION_REASONS: json.dumps(dict(sorted(reasons.items(), key=lambda kv: int(kv[0])))),
    }
    obj = node_partitioning_object(node, spec, annotations)
    if meta.get("resourceVersion"):
        obj["metadata"]["resourceVersion"] = meta["resourceVersion"]
    return obj
