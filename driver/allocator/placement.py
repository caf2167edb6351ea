"""GPU-level placement of soft slices among the GPUs of a node: `binpack` (the most used GPU first) or
`spread` (the least used first), where a request could take any of several shareable devices.

carve's allocator (the simulator, the controller's what-if planning, `carve allocate`) applies it by
reordering a request's shareable candidates before the first-fit search; everything else about the search
stays the scheduler's. The kube-scheduler itself does not read it: on the DRA path it tries a node's
devices first-fit in the order the slices publish them (slices by name, devices as listed;
k8s.io/dynamic-resource-allocation/structured at v1.37.2), which for shareable devices is a binpack in
publish order (docs/allocate.md, "Placement").

The policy comes from the opaque `SliceConfig.placement` (api/v1alpha1) of the request's DeviceClass, else
of the claim's config entries that apply to the request; the class's word wins (admin over tenant). Unset
means first fit, the scheduler's own order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

from driver.names import DRIVER_NAME

Placement = Literal["binpack", "spread"]
PLACEMENTS: tuple[str, ...] = ("binpack", "spread")
# The capacity whose use orders the GPUs: memory, what a soft slice is sized by.
LOAD_CAPACITY = "memory"


def _placement_of(entry: Mapping[str, Any]) -> str | None:
    opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
    if not isinstance(opaque, Mapping) or opaque.get("driver") != DRIVER_NAME:
        return None
    params = opaque.get("parameters")
    if not isinstance(params, Mapping) or params.get("kind") != "SliceConfig":
        return None
    value = params.get("placement")
    return value if value in PLACEMENTS else None


def placement_for(
    request_base: str, class_config: Iterable[Mapping[str, Any]], claim_config: Iterable[Mapping[str, Any]]
) -> str | None:
    """The placement of one request: the last class entry that sets one, else the last applying claim
    entry (an entry without `requests` applies to every request). Invalid values were refused where the
    config is validated (api/v1alpha1); here they count as unset."""
    for entry in reversed(list(class_config)):
        found = _placement_of(entry)
        if found:
            return found
    for entry in reversed(list(claim_config)):
        applies = entry.get("requests") if isinstance(entry, Mapping) else None
        if applies and request_base not in applies:
            continue
        found = _placement_of(entry)
        if found:
            return found
    return None


def used_fraction(held: Mapping[str, int] | None, capacity: Mapping[str, Any]) -> Fraction:
    """How full a shareable device is: consumed / total of LOAD_CAPACITY (0 when it has none)."""
    spec = capacity.get(LOAD_CAPACITY)
    total = getattr(spec, "value", spec)
    if not total:
        return Fraction(0)
    return Fraction((held or {}).get(LOAD_CAPACITY, 0), int(total))


def reorder(candidates: Sequence[Any], placement: str | None, load: Any) -> list[Any]:
    """`candidates` with the shareable ones (those `load` gives a number for) reordered among their own
    positions: binpack fullest first, spread emptiest first, ties in device order; the others stay put."""
    if placement not in PLACEMENTS:
        return list(candidates)
    positions = [i for i, c in enumerate(candidates) if load(c) is not None]
    ranked = sorted(
        positions, key=lambda i: (-load(candidates[i]) if placement == "binpack" else load(candidates[i]), i)
    )
    out = list(candidates)
    for slot, i in zip(positions, ranked, strict=True):
        out[slot] = candidates[i]
    return out
