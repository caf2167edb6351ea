"""Resource pools: which slices count, whether a pool can be allocated from, and device order.

Per pool (driver, pool name) only the slices of the newest generation count. A pool is complete
when it has as many of those slices as they declare in `resourceSliceCount`; incomplete pools
are skipped (and make `allocationMode: All` fail, since "all" is not known). A pool with duplicate
device names or counters that reference missing counter sets is invalid and skipped too. Device
order, which is the allocator's preference, is pool (driver, name), slice name, then position.
Which nodes a device serves: its slice's (or, with perDeviceNodeSelection, its own) nodeName,
allNodes, or nodeSelector, whose `metadata.name` fields are matched as the scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from driver.allocator.model import Device, Slice

NAME_FIELD = "metadata.name"


@dataclass
class Pool:
    driver: str
    name: str
    generation: int
    slices: list[Slice]
    complete: bool
    invalid: str = ""
    counter_sets: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.driver, self.name)

    @property
    def usable(self) -> bool:
        return self.complete and not self.invalid

    def problem(self) -> str:
        if self.invalid:
            return f"pool {self.driver}/{self.name} is invalid: {self.invalid}"
        if not self.complete:
            have = len(self.slices)
            want = self.slices[0].slice_count if self.slices else 0
            return (f"pool {self.driver}/{self.name} is incomplete: generation {self.generation} has "
                    f"{have} of {want} slices")
        return ""


def gather(slices: list[Slice]) -> list[Pool]:
    """Newest generation per pool, sorted by (driver, pool); slices sorted by name."""
    newest: dict[tuple[str, str], list[Slice]] = {}
    for s in slices:
        key = (s.driver, s.pool)
        current = newest.get(key)
        if current is None or s.generation > current[0].generation:
            newest[key] = [s]
        elif s.generation == current[0].generation:
            current.append(s)
    pools = []
    for (driver, name), members in sorted(newest.items()):
        members.sort(key=lambda s: s.name)
        complete = all(s.slice_count == len(members) for s in members)
        pool = Pool(driver, name, members[0].generation, members, complete)
        _validate(pool)
        pools.append(pool)
    return pools


def _validate(pool: Pool) -> None:
    seen: set[str] = set()
    for s in pool.slices:
        for cs_name, counters in s.counter_sets.items():
            if cs_name in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs_name}"
                return
            pool.counter_sets[cs_name] = counters
    for s in pool.slices:
        for d in s.devices:
            if d.name in seen:
                pool.invalid = f"duplicate device name {d.name}"
                return
            seen.add(d.name)
            for cs_name, counters in d.consumes:
                known = pool.counter_sets.get(cs_name)
                if known is None:
                    pool.invalid = f"device {d.name}: counter set {cs_name} not found"
                    return
                for c, _ in counters:
                    if c not in known:
                        pool.invalid = f"device {d.name}: counter {c} not found in counter set {cs_name}"
                        return


def nodes_of(pools: list[Pool]) -> list[str]:
    """Every node named by a slice or a device (perDeviceNodeSelection), or by a node selector's
    `metadata.name` field, sorted."""
    names: set[str] = set()
    for p in pools:
        for s in p.slices:
            if s.node_name:
                names.add(s.node_name)
            names |= selector_names(s.node_selector)
            for d in s.devices:
                if d.node_name:
                    names.add(d.node_name)
                elif s.per_device:
                    names |= selector_names(d.node_selector)
    return sorted(names)


def selector_names(selector: Mapping[str, Any] | None) -> set[str]:
    """The node names a node selector's `metadata.name In` fields list."""
    out: set[str] = set()
    for term in (selector or {}).get("nodeSelectorTerms") or ():
        for req in (term or {}).get("matchFields") or ():
            if req.get("key") == NAME_FIELD and req.get("operator") == "In":
                out |= {v for v in req.get("values") or () if isinstance(v, str)}
    return out


def roams_to(device: Device, node: str | None) -> bool:
    """Whether a device without a nodeName (a node selector, or allNodes) can be used from `node`
    (None: a node no slice names)."""
    return device.node_selector is None or selector_admits(device.node_selector, node)


def selector_admits(selector: Mapping[str, Any], node: str | None) -> bool:
    """A v1.NodeSelector as the scheduler reads it, for a node known only by name: the terms are
    ORed; within a term `matchFields` (`metadata.name`, In or NotIn with exactly one value) decide,
    and label `matchExpressions` are taken to hold, since carve does not know node labels. A term
    with no requirements, or with a field requirement the scheduler cannot parse, takes no node."""
    return any(_term_admits(t, node) for t in selector.get("nodeSelectorTerms") or () if t)


def _term_admits(term: Mapping[str, Any], node: str | None) -> bool:
    fields = term.get("matchFields") or ()
    if not fields and not term.get("matchExpressions"):
        return False
    for req in fields:
        values = req.get("values") or ()
        if req.get("operator") not in ("In", "NotIn") or len(values) != 1:
            return False
        # The scheduler matches fields against {"metadata.name": node name}; another key reads "".
        have = (node or None) if req.get("key") == NAME_FIELD else ""
        if (have == values[0]) != (req["operator"] == "In"):
            return False
    return True


@dataclass
class NodeIndex:
    """Devices by the node they serve, built once per slice generation: node-local devices are
    bucketed in one pass; the few without a nodeName are checked per node."""

    local: dict[str, list[tuple[int, Pool, Device]]]
    roaming: list[tuple[int, Pool, Device]]

    def devices(self, node: str | None) -> list[tuple[Pool, Device]]:
        mine = self.local.get(node, []) if node else []
        extra = [x for x in self.roaming if roams_to(x[2], node)]
        merged = sorted(mine + extra, key=lambda x: x[0]) if extra else mine
        return [(p, d) for _, p, d in merged]


def node_index(pools: list[Pool]) -> NodeIndex:
    index = NodeIndex({}, [])
    position = 0
    for p in pools:
        for s in p.slices:
            for d in s.devices:
                if d.node_name:
                    index.local.setdefault(d.node_name, []).append((position, p, d))
                else:
                    index.roaming.append((position, p, d))
                position += 1
    return index
