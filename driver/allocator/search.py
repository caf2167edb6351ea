"""First-fit search with backtracking for one claim on one node, as the kube-scheduler does it.

Requests are satisfied in order; a `firstAvailable` request tries its subrequests in order; an
`ExactCount` request takes devices in device order and only tries combinations (never
permutations) of the devices it picks; `All` takes every matching device or fails. For each
candidate the checks run in the scheduler's order: in use, selectors, capacity, counters, taints,
constraints. The first complete solution wins; there is no scoring.
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


class Search:
    def __init__(self, claim: Claim, ledger: Ledger, candidates: Callable[[Request], list[Candidate]],
                 all_pools: list[Pool]) -> None:
        self.claim = claim
        self.ledger = ledger
        self.candidates = candidates
        self.all_pools = all_pools
        self.picks: list[Pick] = []
        self.allocating: set[tuple[str, str, str]] = set()
        self.allocating_capacity: dict[tuple[str, str, str], dict[str, int]] = {}
        self.allocating_counters: dict[tuple[str, str], Counters] = {}
        self.constraints = [_ConstraintState(c) for c in claim.constraints]
        self.steps = 0

    def run(self) -> list[Pick] | None:
        return list(self.picks) if self._request(0) else None

    # --- recursion ---------------------------------------------------------------------------

    def _request(self, ri: int) -> bool:
        if ri == len(self.claim.requests):
            return True
        return any(self._device(ri, alt, 0, 0) for alt in self.claim.requests[ri])

    def _device(self, ri: int, req: Request, n: int, start: int) -> bool:
        if req.all_devices:
            return self._all(ri, req)
        if n == req.count:
            return self._request(ri + 1)
        if len(self.picks) + req.count - n > MAX_RESULTS:
            return False
        cands = self.candidates(req)
        for i in range(start, len(cands)):
            pool, dev, outcome = cands[i]
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise SearchAborted(f"claim {self.claim.name}: gave up after trying {MAX_STEPS} devices "
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
            if self._device(ri, req, n + 1, i + 1):
                return True
            undo()
        return False

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
            consumed = consumption(req, dev)
            if consumed is None or capacity_shortfall(dev, consumed, self.held(dev)):
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
