"""Why a claim does not fit: the words in `Unallocatable` and the allocate.carve.dev/reason annotation.

For each request (each subrequest of firstAvailable) the devices of a node are counted stage by
stage, in the order the scheduler rules them out: class selectors, request selectors, pool state,
already in use, capacity, counters, taints. A request with enough devices left on its own is
"fine alone"; if all are, the claim failed on the combination (constraints, or requests competing
for the same devices). Device-level reasons are listed for the first few devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver.allocator.capacity import (
    add_counters,
    blocking_taint,
    capacity_shortfall,
    consumption,
    counter_shortfall,
)
from driver.allocator.cel import CelError
from driver.allocator.model import Claim, Request

if TYPE_CHECKING:
    from driver.allocator.allocator import Allocator

DETAIL = 3          # device reasons shown per request
NODES_IN_DETAIL = 2


def why(a: Allocator, claim: Claim, nodes: list[str | None]) -> str:
    if not a.pools:
        return f"claim {claim.name}: no ResourceSlices"
    if len(nodes) == 1:
        where = f" on node {nodes[0]}" if nodes[0] else ""
        return f"claim {claim.name} does not fit{where}: " + on_node(a, claim, nodes[0])
    parts = [f"{n}: {on_node(a, claim, n)}" for n in nodes[:NODES_IN_DETAIL]]
    more = len(nodes) - NODES_IN_DETAIL
    tail = f"; {more} more nodes" if more > 0 else ""
    return f"claim {claim.name} does not fit on any of {len(nodes)} nodes; " + "; ".join(parts) + tail


def on_node(a: Allocator, claim: Claim, node: str | None) -> str:
    lines = []
    all_fine = True
    for alts in claim.requests:
        texts = []
        for req in alts:
            fine, text = _request(a, claim, req, node)
            texts.append(text)
            if fine:
                break
        else:
            all_fine = False
        # the alternative that fits, or every one tried (one alone is its own text)
        lines.append(texts[-1] if fine else " / ".join(texts))
    if all_fine:
        kinds = ", ".join(("distinctAttribute " if c.distinct else "matchAttribute ") + c.attribute
                          for c in claim.constraints)
        reason = (f"the constraints ({kinds}) rule out every combination" if kinds
                  else "the requests compete for the same devices")
        return f"each request fits on its own, but not together: {reason}"
    return "; ".join(lines)


def _request(a: Allocator, claim: Claim, req: Request, node: str | None) -> tuple[bool, str]:
    dc = a.classes[req.class_name]  # Allocator.allocate refused a claim naming a missing class
    devices = a.node_devices(node)
    in_class = []
    cel_errors = []
    for pool, dev in devices:
        outcome = a.class_selection(dc, dev)
        if isinstance(outcome, CelError):
            cel_errors.append(outcome)
        elif outcome:
            in_class.append((pool, dev))
    selected = []
    for pool, dev in in_class:
        outcome = a.selection(req, dc, dev, claim)
        if isinstance(outcome, CelError):
            cel_errors.append(outcome)
        elif outcome:
            selected.append((pool, dev))
    need = "all matching devices" if req.all_devices else (
        "1 device" if req.count == 1 else f"{req.count} devices")
    head = (f"request {req.name} needs {need}: {len(in_class)} of {len(devices)} devices match class "
            f"{dc.name}")
    if req.selectors:
        head += f", {len(selected)} also match the request's selectors"
    if cel_errors:
        head += f"; {cel_errors[0]}"
    reasons: list[str] = []
    usable = 0
    for pool, dev in selected:
        why_not = _device(a, req, pool, dev)
        if why_not:
            reasons.append(f"{dev.name}: {why_not}")
        else:
            usable += 1
    enough = usable >= (req.count if not req.all_devices else max(len(selected), 1))
    if req.all_devices and reasons:
        enough = False
    if not selected or enough:
        return enough, head
    text = f"{head}; {usable} usable"
    if reasons:
        text += "; " + "; ".join(reasons[:DETAIL])
        if len(reasons) > DETAIL:
            text += f"; {len(reasons) - DETAIL} more ruled out"
    return enough, text


def _device(a: Allocator, req: Request, pool, dev) -> str:
    if not pool.usable:
        return pool.problem()
    if not req.admin and dev.key in a.ledger.in_use:
        return "in use by another claim"
    consumed = consumption(req, dev)
    if consumed is None:
        missing = [n for n, _ in req.capacity or () if n not in dev.capacity]
        return f"has no capacity {', '.join(missing)}"
    held = a.ledger.shared.get(dev.key) if dev.allow_multiple else None
    short = capacity_shortfall(dev, consumed, held)
    if short:
        return short
    if dev.consumes and not (dev.allow_multiple and a.ledger.shares.get(dev.key)):
        mine: dict = {}
        add_counters(mine, dev)
        short = counter_shortfall(pool.counter_sets, a.ledger.counters.get(pool.key, {}), mine)
        if short:
            return short
    taint = blocking_taint(dev, req)
    if taint is not None:
        return (f"taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} "
                "is not tolerated")
    return ""
