"""First-fit search with backtracking for one claim on one node, as the kube-scheduler does it.

Requests are satisfied in order; a `firstAvailable` request tries its subrequests in order; an
`ExactCount` request takes devices in device order and only tries combinations (never
permutations) of the devices it picks; `All` takes every matching device or fails. For each
candidate the checks run in the scheduler's order: in use, selectors, capacity, counters, taints,
constraints. The first complete solution wins; there is no scoring.

Pruning (on unless `prune=False`) only skips parts of the search that cannot hold the first
solution, so it never changes a result, only how fast a claim that does not fit fails. The search
visits assignments in lexicographic order of candidate positions and returns the first valid one,
G; each rule below removes only assignments that are not G:
- count: a request that still needs k devices stops when fewer than k candidates are left;
- twins: of two consecutive requests identical but for their name (same class, selectors, count,
  capacity, tolerations, admin, and the same constraints apply to both), the second starts at the
  first device of the first. Were G to start the second lower, swapping the two requests' devices
  would give a valid assignment that is lexicographically smaller than G;
- equivalent devices: when device d failed at one position, a later device d' at the same
  position is skipped if exchanging d and d' maps every assignment onto a valid one: neither is
  already picked, both consume no counters, have the same capacities, holdings, taints and
  binding fields, the same values of every constrained attribute, and the same selector outcome
  for every request of the claim. Were G to pick d' there, exchanging would give a smaller valid one.
Pruning is off for a claim whose candidates hold a CEL error, so that the error surfaces exactly
where the unpruned search (and the scheduler) would meet it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from driver.allocator.capacity import (
    Counters,
    add_counters,
    blocking_taint,
    capacity_shortfall,
    consumption,
    counter_shortfall,
)
from driver.allocator.cel import CelError
from driver.allocator.model import MAX_RESULTS, Claim, Constraint, Device, Request
from driver.allocator.pools import Pool

# The scheduler stops a Filter call after 10 s; we count device attempts instead, so results do
# not depend on machine speed.
MAX_STEPS = 200_000

Candidate = tuple[Pool, Device, "bool | CelError"]


class Candidates(list):
    """A request's candidates in device order; `has_errors` when some outcome is a CelError."""

    has_errors: bool = False


class SearchAborted(Exception):
    """The search hit an error that fails the claim (CEL runtime error, step budget, All)."""


@dataclass
class Ledger:
    """What claims already allocated hold: maintained by the Allocator, read by searches."""

    in_use: set[tuple[str, str, str]] = field(default_factory=set)
    shared: dict[tuple[str, str, str], dict[str, int]] = field(default_factory=dict)
    shares: dict[tuple[str, str, str], int] = field(default_factory=dict)
    counters: dict[tuple[str, str], Counters] = field(default_factory=dict)
    oversubscribed: set[tuple[str, str]] = field(default_factory=set)


@dataclass(slots=True)
class Pick:
    request: Request
    pool: Pool
    device: Device
    consumed: dict[str, int] | None


def _typed(attr: Any) -> tuple[str, Any] | None:
    if not isinstance(attr, dict):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in attr:
            return (kind, attr[kind])
    return None


class _ConstraintState:
    def __init__(self, c: Constraint) -> None:
        self.c = c
        self.values: list[tuple[str, Any]] = []

    def add(self, request: Request, device: Device) -> bool:
        if not self.c.applies(request):
            return True
        value = _typed(device.attribute(self.c.attribute))
        if value is None:
            return False
        if self.c.distinct and value in self.values:
            return False
        if not self.c.distinct and self.values and self.values[0] != value:
            return False
        self.values.append(value)
        return True

    def remove(self, request: Request) -> None:
        if self.c.applies(request):
            self.values.pop()


def find_twins(claim: Claim) -> list[bool]:
    """twins[ri]: request ri is request ri-1 but for its name (see the module docstring)."""
    out = [False] * len(claim.requests)
    for ri in range(1, len(claim.requests)):
        prev, cur = claim.requests[ri - 1], claim.requests[ri]
        if len(prev) != 1 or len(cur) != 1 or prev[0].sub is not None or cur[0].sub is not None:
            continue
        a, b = prev[0], cur[0]
        out[ri] = (not a.all_devices and not b.all_devices and a.class_name == b.class_name
                   and a.selectors == b.selectors and a.count == b.count and a.admin == b.admin
                   and a.tolerations == b.tolerations and a.capacity == b.capacity
                   and all(c.applies(a) == c.applies(b) for c in claim.constraints))
    return out


class Search:
    def __init__(self, claim: Claim, ledger: Ledger, candidates: Callable[[Request], list[Candidate]],
                 all_pools: list[Pool], prune: bool = True, twins: list[bool] | None = None) -> None:
        self.claim = claim
        self.ledger = ledger
        self._lookup = candidates
        self._cands: dict[int, list[Candidate]] = {}  # id(request) -> its candidates, for this search
        self.all_pools = all_pools
        self.picks: list[Pick] = []
        self.allocating: set[tuple[str, str, str]] = set()
        self.allocating_capacity: dict[tuple[str, str, str], dict[str, int]] = {}
        self.allocating_counters: dict[tuple[str, str], Counters] = {}
        self.constraints = [_ConstraintState(c) for c in claim.constraints]
        self.steps = 0
        self.prune = prune and not any(getattr(self.candidates(r), "has_errors", True)
                                       for alts in claim.requests for r in alts)
        self.twins = (twins if twins is not None else find_twins(claim)) if self.prune else []
        # candidate position of each request's first pick (the twins rule reads it)
        self.first_index: list[int] = [0] * len(claim.requests)
        self._members: list[set[tuple[str, str, str]]] | None = None
        self._signatures: dict[tuple[str, str, str], tuple] = {}

    def run(self) -> list[Pick] | None:
        return list(self.picks) if self._request(0) else None

    def candidates(self, req: Request) -> list[Candidate]:
        found = self._cands.get(id(req))
        if found is None:
            found = self._cands[id(req)] = self._lookup(req)
        return found

    # --- recursion ---------------------------------------------------------------------------

    def _request(self, ri: int) -> bool:
        if ri == len(self.claim.requests):
            return True
        start = self.first_index[ri - 1] if self.prune and self.twins[ri] else 0
        return any(self._device(ri, alt, 0, start) for alt in self.claim.requests[ri])

    def _device(self, ri: int, req: Request, n: int, start: int) -> bool:
        if req.all_devices:
            return self._all(ri, req)
        if n == req.count:
            return self._request(ri + 1)
        if len(self.picks) + req.count - n > MAX_RESULTS:
            return False
        cands = self.candidates(req)
        # The count rule: past `stop` fewer candidates are left than the request still needs.
        stop = len(cands) - (req.count - n) + 1 if self.prune else len(cands)
        failed: list[Device] = []  # devices whose subtree failed at this position
        for i in range(start, stop):
            pool, dev, outcome = cands[i]
            if failed and self._equivalent_to_failed(dev, failed):
                continue
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise SearchAborted(f"gave up after trying {MAX_STEPS} devices "
                                    "(the scheduler would time out too); simplify the constraints")
            if req.admin:
                if dev.key in self.allocating:
                    continue
            elif self.in_use(dev):
                continue
            if isinstance(outcome, CelError):
                raise SearchAborted(str(outcome))
            undo = self.try_device(req, pool, dev)
            if undo is None:
                continue
            if n == 0:
                self.first_index[ri] = i
            if self._device(ri, req, n + 1, i + 1):
                return True
            undo()
            if self.prune and self._may_stand_for_others(dev):
                failed.append(dev)
        return False

    # --- equivalent devices ----------------------------------------------------------------------

    def _may_stand_for_others(self, dev: Device) -> bool:
        return not dev.consumes and dev.key not in self.allocating and dev.key not in self.allocating_capacity

    def _equivalent_to_failed(self, dev: Device, failed: list[Device]) -> bool:
        if not self._may_stand_for_others(dev):
            return False
        mine = self._signature(dev)
        return any(self._signature(f) == mine for f in failed)

    def _signature(self, dev: Device) -> tuple:
        """Everything a check of this claim reads from a device without counters, but its name."""
        found = self._signatures.get(dev.key)
        if found is None:
            if self._members is None:
                self._members = [{d.key for _, d, _ in self.candidates(r)}
                                 for alts in self.claim.requests for r in alts]
            found = self._signatures[dev.key] = (
                tuple(sorted(dev.capacity.items())), dev.allow_multiple, dev.taints, dev.binds_to_node,
                dev.binding_conditions, dev.binding_failure_conditions,
                tuple(_typed(dev.attribute(c.attribute)) for c in self.claim.constraints),
                tuple(dev.key in m for m in self._members))
        # Holdings change during a search only through picks, which _may_stand_for_others excludes.
        return (found, dev.key in self.ledger.in_use, sorted((self.ledger.shared.get(dev.key) or {}).items()))

    def _all(self, ri: int, req: Request) -> bool:
        devices = self.all_devices(req)
        undos = []
        for pool, dev in devices:
            undo = self.try_device(req, pool, dev)
            if undo is None:
                break
            undos.append(undo)
        else:
            if devices and len(self.picks) <= MAX_RESULTS and self._request(ri + 1):
                return True
        for undo in reversed(undos):
            undo()
        return False

    def all_devices(self, req: Request) -> list[tuple[Pool, Device]]:
        """Every matching device for allocationMode All; every pool must be complete and valid."""
        for p in self.all_pools:
            if not p.usable:
                raise SearchAborted(f"request {req.name}: asks for all devices, but {p.problem()}")
        out = []
        for pool, dev, outcome in self.candidates(req):
            if isinstance(outcome, CelError):
                raise SearchAborted(str(outcome))
            # The scheduler fixes this list before the search starts, so capacity is judged against
            # what other claims hold, not what this claim's earlier requests took: a device those
            # filled stays on the list and then fails the request.
            consumed = consumption(req, dev)
            held = self.ledger.shared.get(dev.key) if dev.allow_multiple else None
            if consumed is None or capacity_shortfall(dev, consumed, held):
                continue
            out.append((pool, dev))
        return out

    # --- one device ----------------------------------------------------------------------------

    def in_use(self, dev: Device) -> bool:
        return dev.key in self.ledger.in_use or dev.key in self.allocating

    def held(self, dev: Device) -> dict[str, int] | None:
        if not dev.allow_multiple:
            return None
        held = dict(self.ledger.shared.get(dev.key) or {})
        for name, v in (self.allocating_capacity.get(dev.key) or {}).items():
            held[name] = held.get(name, 0) + v
        return held

    def try_device(self, req: Request, pool: Pool, dev: Device) -> Callable[[], None] | None:
        """Allocate dev for req if every check passes; return the undo, or None."""
        multi = dev.allow_multiple
        if req.admin:
            if not multi and dev.key in self.allocating:
                return None
        elif self.in_use(dev):
            return None
        consumed = consumption(req, dev)
        if consumed is None or capacity_shortfall(dev, consumed, self.held(dev)):
            return None
        shared_already = multi and (self.ledger.shares.get(dev.key, 0) > 0
                                    or dev.key in self.allocating_capacity)
        counted = False
        if dev.consumes and not shared_already:
            mine = self.allocating_counters.setdefault(pool.key, {})
            add_counters(mine, dev)
            counted = True
            if counter_shortfall(pool.counter_sets, self.ledger.counters.get(pool.key, {}), mine,
                                 all_sets=pool.key in self.ledger.oversubscribed):
                add_counters(mine, dev, -1)
                return None
        added = 0

        def rollback() -> None:
            for c in reversed(self.constraints[:added]):
                c.remove(req)
            if counted:
                add_counters(self.allocating_counters[pool.key], dev, -1)

        if blocking_taint(dev, req) is not None:
            rollback()
            return None
        for c in self.constraints:
            if not c.add(req, dev):
                rollback()
                return None
            added += 1
        if multi:
            mine_cap = self.allocating_capacity.setdefault(dev.key, {})
            for name, v in consumed.items():
                mine_cap[name] = mine_cap.get(name, 0) + v
        else:
            self.allocating.add(dev.key)
        self.picks.append(Pick(req, pool, dev, consumed if multi else None))

        def undo() -> None:
            self.picks.pop()
            if multi:
                cap = self.allocating_capacity[dev.key]
                for name, v in consumed.items():
                    cap[name] -= v
                if not any(self_pick.device is dev for self_pick in self.picks):
                    del self.allocating_capacity[dev.key]
            else:
                self.allocating.discard(dev.key)
            rollback()

        return undo
