"""The Allocator: slices and classes indexed once, allocated claims recorded, claims allocated.

`Allocator(slices, classes)` gathers pools (newest complete generation), keeps a ledger of what
recorded claims hold (exclusive devices, shares with their consumed capacity, counters), and
caches: CEL results per (expression, the values it reads) (cel_cache), each class's devices per
node once per slice generation, candidate lists per (node, class, request selectors), and which
claim shapes found no room on a node while nothing there changed. `allocate(claim, node)` returns
the `status.allocation` dict or raises `Unallocatable`; it never records. `add_allocated` /
`remove_allocated` update the ledger.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from driver.allocator import capacity as cap
from driver.allocator import placement, pools, quantity, result
from driver.allocator.cel import CelError
from driver.allocator.cel_cache import SelectorCache
from driver.allocator.explain import why
from driver.allocator.model import (
    Claim,
    Device,
    DeviceClass,
    ModelError,
    Request,
    Slice,
    claim_uid,
    read_claim,
    read_class,
    read_slice,
)
from driver.allocator.search import Candidates, Ledger, Search, SearchAborted, find_twins


class Unallocatable(Exception):
    """A claim that cannot be allocated; the message says which request and what ruled devices out."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class Allocator:
    def __init__(self, slices: Iterable[Mapping[str, Any] | Slice], classes: Iterable[Mapping[str, Any]],
                 cel_cache: bool = True) -> None:
        """`slices` are ResourceSlice objects (dicts), or already read with model.read_slice."""
        self._lock = threading.RLock()
        self.selectors = SelectorCache(enabled=cel_cache)
        self.classes: dict[str, DeviceClass] = {}
        for c in classes:
            dc = read_class(c)
            self.classes[dc.name] = dc
        self.ledger = Ledger()
        self._pool_versions: dict[tuple[str, str], int] = {}  # bumped when a pool's holdings change
        self._claims: dict[str, list[tuple[tuple[str, str, str], dict[str, int] | None, bool]]] = {}
        # how many recorded claims hold each exclusive device: two can (a double allocation the API
        # let through), and the device stays in use until the last of them is gone
        self._holders: dict[tuple[str, str, str], int] = {}
        self._counts = {"claims_allocated": 0, "claims_unallocatable": 0, "search_steps": 0,
                        "searches_skipped": 0}
        self._set_slices(slices)

    # --- slices --------------------------------------------------------------------------------

    def _set_slices(self, slices: Iterable[Mapping[str, Any] | Slice]) -> None:
        parsed = [s if isinstance(s, Slice) else read_slice(s) for s in slices]
        self.pools = pools.gather(parsed)
        self.nodes = pools.nodes_of(self.pools)
        self.devices: dict[tuple[str, str, str], tuple[pools.Pool, Device]] = {
            d.key: (p, d) for p in self.pools for s in p.slices for d in s.devices}
        self._node_index = pools.node_index(self.pools)
        self._node_devices: dict[str | None, list[tuple[pools.Pool, Device]]] = {}
        self._node_pool_keys: dict[str | None, list[tuple[str, str]]] = {}
        self._class_index: dict[tuple[str | None, str], Candidates] = {}
        self._candidates: dict[tuple, Candidates] = {}
        self._node_pools: dict[str | None, list[pools.Pool]] = {}
        # (claim shape id, node) -> the node's ledger stamp when that shape did not fit there
        self._shape_ids: dict[tuple, int] = {}
        self._no_room: dict[tuple, int] = {}
        self._rebuild_counters()

    def replace_slices(self, slices: Iterable[Mapping[str, Any] | Slice]) -> None:
        """New pool generations: indices and counters are rebuilt; recorded claims stay recorded."""
        with self._lock:
            self._set_slices(slices)
            current = {p.key: p.generation for p in self.pools}
            self.selectors.forget(lambda k: current.get((k[0], k[1])) == k[2])

    def _rebuild_counters(self) -> None:
        self.ledger.counters = {}
        self.ledger.oversubscribed = set()
        self._over_sets: dict[tuple[str, str], set[str]] = {}  # per pool: counter sets over their totals
        for key in set(self.ledger.in_use) | {k for k, n in self.ledger.shares.items() if n > 0}:
            self._count(key, +1)

    def _count(self, key: tuple[str, str, str], sign: int) -> None:
        found = self.devices.get(key)
        if found and found[1].consumes:
            pool, dev = found
            used = self.ledger.counters.setdefault(pool.key, {})
            cap.add_counters(used, dev, sign)
            # Only the sets this device consumes from changed: recheck those, not the whole pool.
            over = self._over_sets.setdefault(pool.key, set())
            for cs, _ in dev.consumes:
                if cap.oversubscribed({cs: pool.counter_sets.get(cs, {})}, used):
                    over.add(cs)
                else:
                    over.discard(cs)
            if over:
                self.ledger.oversubscribed.add(pool.key)
            else:
                self.ledger.oversubscribed.discard(pool.key)

    # --- recorded claims -----------------------------------------------------------------------

    def add_allocated(self, claim: Mapping[str, Any]) -> None:
        """Record what a claim with status.allocation holds (admin access holds nothing)."""
        uid = claim_uid(claim)
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        with self._lock:
            if uid in self._claims:
                self.remove_allocated(uid)
            held = []
            for r in results:
                if r.get("adminAccess"):
                    continue
                key = (r["driver"], r["pool"], r["device"])
                self._touch(key)
                if r.get("shareID"):
                    consumed = {n: quantity.units(v) for n, v in (r.get("consumedCapacity") or {}).items()}
                    self._share(key, consumed, +1)
                    held.append((key, consumed, True))
                else:
                    holders = self._holders.get(key, 0)
                    self._holders[key] = holders + 1
                    if not holders:
                        self.ledger.in_use.add(key)
                        self._count(key, +1)
                    held.append((key, None, False))
            self._claims[uid] = held

    def remove_allocated(self, uid: str) -> None:
        with self._lock:
            for key, consumed, shared in self._claims.pop(uid, []):
                self._touch(key)
                if shared:
                    self._share(key, consumed or {}, -1)
                    continue
                left = self._holders[key] - 1
                if left:
                    self._holders[key] = left
                else:
                    del self._holders[key]
                    self.ledger.in_use.discard(key)
                    self._count(key, -1)

    def _touch(self, key: tuple[str, str, str]) -> None:
        pool = (key[0], key[1])
        self._pool_versions[pool] = self._pool_versions.get(pool, 0) + 1

    def _share(self, key: tuple[str, str, str], consumed: dict[str, int], sign: int) -> None:
        before = self.ledger.shares.get(key, 0)
        after = before + sign
        agg = self.ledger.shared.setdefault(key, {})
        for n, v in consumed.items():
            agg[n] = agg.get(n, 0) + sign * v
        # Counters of a shared device are consumed once, while it has any share (only a recorded
        # share is ever removed, so the last one going takes `after` to 0 from 1).
        if after <= 0:
            self.ledger.shares.pop(key, None)
            self.ledger.shared.pop(key, None)
            self._count(key, -1)
        else:
            self.ledger.shares[key] = after
            if before == 0:
                self._count(key, +1)

    # --- candidates ----------------------------------------------------------------------------

    def node_devices(self, node: str | None) -> list[tuple[pools.Pool, Device]]:
        found = self._node_devices.get(node)
        if found is None:
            found = self._node_devices[node] = self._node_index.devices(node)
        return found

    def device_class(self, req: Request) -> DeviceClass:
        dc = self.classes.get(req.class_name)
        if dc is None:
            raise Unallocatable(f"request {req.name}: DeviceClass {req.class_name} not found")
        return dc

    def selection(self, req: Request, dc: DeviceClass, dev: Device, claim: Claim) -> bool | CelError:
        """Class selectors, then request selectors; a CEL error is returned, not raised."""
        outcome = self.class_selection(dc, dev)
        if outcome is not True:
            return outcome
        return self._request_selection(req, dev, claim)

    def class_selection(self, dc: DeviceClass, dev: Device) -> bool | CelError:
        for i, expr in enumerate(dc.selectors):
            try:
                if not self.selectors.matches(expr, dev):
                    return False
            except CelError as e:
                return CelError(e.expression, f"class {dc.name}: selector #{i} on device "
                                              f"{'/'.join(dev.key)}: {e.message}")
        return True

    def _request_selection(self, req: Request, dev: Device, claim: Claim) -> bool | CelError:
        for i, expr in enumerate(req.selectors):
            try:
                if not self.selectors.matches(expr, dev):
                    return False
            except CelError as e:
                # the claim's name is the prefix of whatever reports it (Unallocatable, explain)
                return CelError(e.expression, f"request {req.name}: selector #{i} on device "
                                              f"{'/'.join(dev.key)}: {e.message}")
        return True

    def class_devices(self, dc: DeviceClass, node: str | None) -> Candidates:
        """The devices of usable pools reachable from `node` that the class's selectors take (or
        fail on), in device order: once per slice generation, shared by every claim."""
        key = (node, dc.name)
        found = self._class_index.get(key)
        if found is None:
            found = Candidates()
            for pool, dev in self.node_devices(node):
                if not pool.usable:
                    continue
                outcome = self.class_selection(dc, dev)
                if outcome is not False:
                    found.append((pool, dev, outcome))
                    found.has_errors = found.has_errors or isinstance(outcome, CelError)
            # Without the CEL result cache this list is not kept: it is a cache of CEL results.
            if self.selectors.enabled:
                self._class_index[key] = found
        return found

    def candidates(self, req: Request, node: str | None, claim: Claim) -> Candidates:
        dc = self.device_class(req)
        found = self._selected(req, dc, node, claim)
        how = placement.placement_for(req.base, dc.config, claim.config)
        if how is None:
            return found
        # binpack/spread (placement.py): the shareable candidates by how full the ledger says they are.
        out = Candidates(
            placement.reorder(
                found,
                how,
                lambda c: placement.used_fraction(self.ledger.shared.get(c[1].key), c[1].capacity)
                if c[1].allow_multiple
                else None,
            )
        )
        out.has_errors = found.has_errors
        return out

    def _selected(self, req: Request, dc: DeviceClass, node: str | None, claim: Claim) -> Candidates:
        members = self.class_devices(dc, node)
        if not req.selectors:
            return members
        key = (node, dc.name, req.selectors)
        found = self._candidates.get(key)
        if found is None:
            found = Candidates()
            for pool, dev, outcome in members:
                if outcome is True:
                    outcome = self._request_selection(req, dev, claim)
                if outcome is not False:
                    found.append((pool, dev, outcome))
                    found.has_errors = found.has_errors or isinstance(outcome, CelError)
            # CEL errors name the claim, so only cache lists without them across claims.
            if self.selectors.enabled and not found.has_errors:
                self._candidates[key] = found
        return found

    # --- allocation ----------------------------------------------------------------------------

    def allocate(self, claim_obj: Mapping[str, Any], node: str | None = None, explain: bool = True,
                 prune: bool = True) -> dict:
        """The claim's status.allocation, or Unallocatable. With explain=False the reason only says
        the claim does not fit (the simulator and the controller retry, they do not read it); the
        explanation costs a pass over every device of every node tried. prune=False searches without
        pruning, for tests that compare the two."""
        try:
            claim = read_claim(claim_obj)
        except ModelError as e:
            raise Unallocatable(str(e)) from None
        with self._lock:
            try:
                out = self._allocate(claim, node, explain, prune)
            except Unallocatable:
                self._counts["claims_unallocatable"] += 1
                raise
            self._counts["claims_allocated"] += 1
            return out

    def _allocate(self, claim: Claim, node: str | None, explain: bool, prune: bool) -> dict:
        if not claim.requests:
            return result.build(claim, [], self.classes, node)
        for alts in claim.requests:
            for req in alts:
                self.device_class(req)
        if node is not None:
            targets: list[str | None] = [node]
        else:
            targets = list(self.nodes) or [None]
        failures: list[str | None] = []
        twins = find_twins(claim)
        shape = _shape(claim, prune)
        if shape is not None:  # hashed once, not once per node
            shape = self._shape_ids.setdefault(shape, len(self._shape_ids))
        for target in targets:
            stamp = self._stamp(target)
            if shape is not None and self._no_room.get((shape, target)) == stamp:
                # Same requests, same devices, same holdings: the search would fail again.
                self._counts["searches_skipped"] += 1
                failures.append(target)
                continue
            search = Search(claim, self.ledger, lambda r, t=target: self.candidates(r, t, claim),
                            self._pools_for(target), prune, twins)
            try:
                picks = search.run()
            except SearchAborted as e:
                self._counts["search_steps"] += search.steps
                raise Unallocatable(f"claim {claim.name}: {e}") from None
            self._counts["search_steps"] += search.steps
            if picks is not None:
                return result.build(claim, picks, self.classes, target)
            if shape is not None:
                self._no_room[(shape, target)] = stamp
            failures.append(target)
        if not explain:
            where = f"node {failures[0]}" if len(failures) == 1 and failures[0] else f"{len(failures)} nodes"
            raise Unallocatable(f"claim {claim.name} does not fit on {where}")
        raise Unallocatable(why(self, claim, failures))

    def _stamp(self, node: str | None) -> int:
        """Changes whenever the holdings of a pool a search on `node` reads change: the sum of
        their versions, which only ever grow."""
        keys = self._node_pool_keys.get(node)
        if keys is None:
            keys = self._node_pool_keys[node] = [p.key for p in self._pools_for(node)]
        versions = self._pool_versions
        if len(keys) == 1:
            return versions.get(keys[0], 0)
        return sum([versions.get(k, 0) for k in keys])

    def _pools_for(self, node: str | None) -> list[pools.Pool]:
        found = self._node_pools.get(node)
        if found is None:
            seen: dict[tuple[str, str], pools.Pool] = {}
            for p, _ in self.node_devices(node):
                seen.setdefault(p.key, p)
            found = self._node_pools[node] = list(seen.values())
        return found

    @property
    def stats(self) -> dict[str, Any]:
        hits, misses = self.selectors.hits, self.selectors.misses
        return {
            "cel_cache_hits": hits,
            "cel_cache_misses": misses,
            "cel_cache_hit_rate": hits / (hits + misses) if hits + misses else 0.0,
            "cel_evaluations": self.selectors.evaluations,
            "cel_fast_path_answers": self.selectors.fast_answers,
            "cel_cache_entries": len(self.selectors),
            **self._counts,
            "claims_recorded": len(self._claims),
            "pools": len(self.pools),
            "devices": len(self.devices),
        }


def _shape(claim: Claim, prune: bool) -> tuple | None:
    """What a search reads from a claim (its requests and constraints, not its name or uid), or
    None when that is not hashable (tolerations are dicts)."""
    shape = (claim.requests, claim.constraints, prune)
    try:
        hash(shape)
    except TypeError:
        return None
    return shape


def allocate(claim: Mapping[str, Any], slices: Iterable[Mapping[str, Any]],
             classes: Iterable[Mapping[str, Any]], allocated: Iterable[Mapping[str, Any]] = (),
             node: str | None = None) -> dict:
    """Pure form: the claim's status.allocation, or Unallocatable."""
    a = Allocator(slices, classes)
    for c in allocated:
        a.add_allocated(c)
    return a.allocate(claim, node)
