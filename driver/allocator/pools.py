"""Resource pools: which slices count, whether a pool can be allocated from, and device order.

Per pool (driver, pool name) only the slices of the newest generation count. A pool is complete
when it has as many of those slices as they declare in `resourceSliceCount`; incomplete pools
are skipped (and make `allocationMode: All` fail, since "all" is not known). A pool with duplicate
device names or counters that reference missing counter sets is invalid and skipped too. Device
order, which is the allocator's preference, is pool (driver, name), slice name, then position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from driver.allocator.model import Device, Slice


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
    """Every node named by a slice or a device (perDeviceNodeSelection), sorted."""
    names = {d.node_name for p in pools for s in p.slices for d in s.devices if d.node_name}
    names |= {s.node_name for p in pools for s in p.slices if s.node_name}
    return sorted(names)


def device_targets(device: Device, node: str | None) -> bool:
    """Whether the device can be used from `node`. Slices with a node selector or allNodes reach
    every node (carve does not evaluate node labels); None means "a node without local slices"."""
    if device.node_name:
        return device.node_name == node
    return True


def devices_for_node(pools: list[Pool], node: str | None) -> list[tuple[Pool, Device]]:
    """The devices reachable from `node`, in allocation order, incomplete/invalid pools included
    (the search skips them; `All` requests and diagnostics need to see them)."""
    out = []
    for p in pools:
        for s in p.slices:
            for d in s.devices:
                if device_targets(d, node):
                    out.append((p, d))
    return out
