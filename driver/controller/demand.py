"""What a pending group of claims asks for, read from the claims alone: the device types its requests
name through carve's classes, the strategies that publish them, how many devices it asks, and the shape
that makes two groups alike (a shape that fits nowhere in a plan is not tried again). Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from driver import names
from driver.controller.nodes import CLASS_TYPES, TYPES
from driver.controller.plan import Pending


def group_shape(group: Pending, isolated: bool) -> str:
    """What makes two groups alike: the simulator's own shape, else the claims' specs; isolated apart."""
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


def strategies_for(types: list[str] | None) -> list[str]:
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


def devices_asked(claims: Iterable[dict[str, Any]]) -> int:
    """Devices the claims ask for, counting each request's first alternative."""
    n = 0
    for claim in claims:
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            alts = [req["exactly"]] if "exactly" in req else list(req.get("firstAvailable") or [{}])
            n += int(alts[0].get("count") or 1)
    return n

