"""What an API server does to a ResourceSlice when a DRA feature gate is off: it drops the gated fields.

A disabled alpha field is removed silently on write (no error), which is how the plugin detects that a
gate is off: it reads back what it wrote. LocalCluster and the HTTP stand-in of the tests apply the same
rules through `drop_fields`, so that detection is tested the way it happens on a default 1.34/1.35 cluster.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

# Gate -> fields it guards in a ResourceSlice (resource.k8s.io/v1), as field names found at spec level,
# device level, or (requestPolicy) inside a device capacity.
GATED_FIELDS: dict[str, frozenset[str]] = {
    "DRAConsumableCapacity": frozenset({"allowMultipleAllocations", "requestPolicy"}),
    "DRAPartitionableDevices": frozenset({"sharedCounters", "consumesCounters", "perDeviceNodeSelection"}),
    "DRADeviceTaints": frozenset({"taints"}),
    "DRADeviceBindingConditions": frozenset({"bindsToNode", "bindingConditions", "bindingFailureConditions"}),
}

SPEC_FIELDS = frozenset({"sharedCounters", "perDeviceNodeSelection"})
DEVICE_FIELDS = frozenset(
    {
        "allowMultipleAllocations",
        "consumesCounters",
        "taints",
        "bindsToNode",
        "bindingConditions",
        "bindingFailureConditions",
    }
)
CAPACITY_FIELDS = frozenset({"requestPolicy"})
KNOWN_FIELDS = SPEC_FIELDS | DEVICE_FIELDS | CAPACITY_FIELDS

# Gates that are alpha (off by default) in 1.34 and 1.35; all four are beta and on in 1.36.
ALPHA_GATES_1_34 = (
    "DRAConsumableCapacity",
    "DRAPartitionableDevices",
    "DRADeviceTaints",
    "DRADeviceBindingConditions",
)


def fields_of_disabled_gates(gates: Iterable[str]) -> frozenset[str]:
    """Field names a server drops when `gates` are off, e.g. for LocalCluster(drop_fields=...)."""
    out: set[str] = set()
    for gate in gates:
        try:
            out |= GATED_FIELDS[gate]
        except KeyError:
            raise ValueError(f"unknown gate {gate!r}; one of {sorted(GATED_FIELDS)}") from None
    return frozenset(out)


def check_drop_fields(drop_fields: Iterable[str]) -> frozenset[str]:
    chosen = frozenset(drop_fields)
    unknown = chosen - KNOWN_FIELDS
    if unknown:
        raise ValueError(
            f"cannot drop {sorted(unknown)}: gated ResourceSlice fields are {sorted(KNOWN_FIELDS)}"
        )
    return chosen


def drop_disabled_fields(slice_obj: dict[str, Any], drop_fields: frozenset[str]) -> dict[str, Any]:
    """A copy of `slice_obj` without the fields in `drop_fields`, wherever the API puts them."""
    out = copy.deepcopy(slice_obj)
    if not drop_fields:
        return out
    spec = out.get("spec") or {}
    for key in SPEC_FIELDS & drop_fields:
        spec.pop(key, None)
    for device in spec.get("devices") or []:
        for key in DEVICE_FIELDS & drop_fields:
            device.pop(key, None)
        if CAPACITY_FIELDS & drop_fields:
            for capacity in (device.get("capacity") or {}).values():
                if isinstance(capacity, dict):
                    for key in CAPACITY_FIELDS & drop_fields:
                        capacity.pop(key, None)
    return out
