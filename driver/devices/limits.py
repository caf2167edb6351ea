"""ResourceSlice API limits per Kubernetes version, and a validator that checks slices against them.

One ApiLimits value per supported version (1.34 .. 1.38), looked up once and passed in. The values
are those of the API server's validation (k8s.io/kubernetes pkg/apis/resource/types.go and validation/
at each tag; docs/devices.md has the table); the validator checks every one of them, plus the
request-policy rules the API server applies to consumable capacity and the device taint rules, so a
slice that passes here is not rejected on write. Errors name the slice, the device and the limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from driver.devices.attributes import parse_quantity
from driver.devices.base import ModelError

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$"
)
_VALUE_KINDS = ("int", "bool", "string", "version")
# Label names and values (device taint keys and values), as metav1validation.ValidateLabelName checks them.
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class SliceLimitError(ModelError):
    """A ResourceSlice the API server would reject; the message names the slice, device and limit."""


@dataclass(frozen=True)
class ApiLimits:
    """What the API server of one Kubernetes version accepts in a ResourceSlice."""

    version: str
    max_devices: int = 128
    max_devices_with_counters_or_taints: int = 128  # 64 from 1.35
    max_attributes_and_capacities: int = 32
    max_attribute_value_length: int = 64
    max_id_length: int = 32
    max_domain_length: int = 63
    max_driver_name_length: int = 63
    max_pool_name_length: int = 253
    max_counters_per_set: int = 32
    # 1.34: one budget of counters for all counter sets of a slice, and consumption counted per device
    # and per slice; counter sets live in the slice of the devices that consume them.
    max_shared_counters_per_slice: int | None = None
    max_consumed_counters_per_device: int | None = None
    max_consumed_counters_per_slice: int | None = None
    counters_with_their_devices: bool = False
    # 1.35+: a slice holds devices or counter sets, never both; sets are counted, as are entries.
    max_counter_sets_per_slice: int | None = None
    max_consumptions_per_device: int | None = None
    max_counters_per_consumption: int | None = None
    counters_in_own_slice: bool = False
    # Device taints: how many per device, which effects (None from 1.35).
    max_taints_per_device: int = 4
    taint_effects: tuple[str, ...] = ("NoExecute", "NoSchedule")
    # 1.37+: consumesCounters[].compatibilityGroups (DRADeviceCompatibilityGroups, alpha, off by default):
    # at most this many DNS-label names per counter consumption; None where the field does not exist.
    max_compatibility_groups: int | None = None
    # Feature gates a cluster of this version has on by default (the fields are dropped otherwise).
    consumable_capacity_default: bool = False
    partitionable_devices_default: bool = False
    device_taints_default: bool = False
    compatibility_groups_default: bool = False
    # 1.34's scheduler checks a shared device's capacity against the slice's device at the request's
    # device index, not the device being allocated (kubernetes/kubernetes#133705, fixed in 1.35 by
    # #133706, in no 1.34 patch: k8s.io/dynamic-resource-allocation v0.34.4, allocateDevice ->
    # CmpRequestOverCapacity(request, device.slice, r.deviceIndex)). A time-sliced device's bookkeeping
    # capacity (slots, memory) would then be charged against the slice's first device's tally: one GPU's
    # ten sharers per slice. Such a version gets time-sliced devices without capacity (slices.py).
    capacity_checked_on_wrong_device: bool = False


_LIMITS_1_35 = ApiLimits(
    version="1.35",
    max_devices_with_counters_or_taints=64,
    max_counter_sets_per_slice=8,
    max_consumptions_per_device=2,
    max_counters_per_consumption=32,
    counters_in_own_slice=True,
    max_taints_per_device=16,
    taint_effects=("NoExecute", "NoSchedule", "None"),
)
# 1.36: the same limits; DRAConsumableCapacity, DRAPartitionableDevices and DRADeviceTaints beta and on.
_LIMITS_1_36 = replace(
    _LIMITS_1_35,
    version="1.36",
    consumable_capacity_default=True,
    partitionable_devices_default=True,
    device_taints_default=True,
)
# 1.37 (v1.37.2): the same slice limits as 1.36 (ResourceSliceMaxDevices 128, ...WithAdvancedFeatures 64,
# 8 counter sets, 2 consumptions of at most 32 counters, 16 taints); new is compatibilityGroups on a
# counter consumption (KEP-5963, alpha: at most 2, unique, DNS labels). DRADeviceTaints is GA (on, may
# still be turned off), DRAResourceClaimDeviceStatus and DRAExtendedResource GA and locked on;
# DRAConsumableCapacity and DRAPartitionableDevices stay beta and on.
_LIMITS_1_37 = replace(_LIMITS_1_36, version="1.37", max_compatibility_groups=2)

LIMITS: dict[str, ApiLimits] = {
    "1.34": ApiLimits(
        version="1.34",
        max_shared_counters_per_slice=32,
        max_consumed_counters_per_device=32,
        max_consumed_counters_per_slice=1024,
        counters_with_their_devices=True,
        capacity_checked_on_wrong_device=True,
    ),
    "1.35": _LIMITS_1_35,
    "1.36": _LIMITS_1_36,
    "1.37": _LIMITS_1_37,
    # 1.38 as of v1.38.0-beta.0: the ResourceSlice API and its limits are those of 1.37 (a claim's
    # capacity requests gain a limit of 32 entries, not a slice's); DRAConsumableCapacity is GA,
    # DRAPartitionableDevices and DRADeviceTaints GA and locked on.
    "1.38": replace(_LIMITS_1_37, version="1.38"),
}


def limits_for(version: str) -> ApiLimits:
    """'1.34', 'v1.35.2', '1.36.0', 'v1.38.0-beta.0', 'v1.37.2-gke.100' -> the ApiLimits of that minor."""
    m = re.match(r"^v?(\d+)\.(\d+)(?:\.\d+(?:[-+][0-9A-Za-z.+-]*)?)?$", (version or "").strip())
    key = f"{m.group(1)}.{m.group(2)}" if m else version
    try:
        return LIMITS[key]
    except KeyError:
        raise ModelError(f"unsupported Kubernetes version {version!r}; one of {', '.join(LIMITS)}") from None


def _fail(limits: ApiLimits, where: str, what: str) -> SliceLimitError:
    return SliceLimitError(f"{where}: {what} (Kubernetes {limits.version})")


def _check_name(value: Any, pattern: re.Pattern[str], max_len: int, where: str, what: str, limits: ApiLimits):
    if not isinstance(value, str) or not value:
        raise _fail(limits, where, f"{what} is missing")
    if len(value) > max_len:
        raise _fail(limits, where, f"{what} {value!r} is {len(value)} characters, more than {max_len}")
    if not pattern.match(value):
        raise _fail(limits, where, f"{what} {value!r} is not a valid name")


def _check_qualified_name(key: str, where: str, limits: ApiLimits) -> None:
    domain, sep, ident = key.rpartition("/")
    if sep:
        _check_name(domain, DNS_SUBDOMAIN, limits.max_domain_length, where, f"domain of {key!r}", limits)
    if not _C_IDENTIFIER.match(ident):
        raise _fail(limits, where, f"name {key!r}: {ident!r} is not a C identifier")
    if len(ident) > limits.max_id_length:
        raise _fail(
            limits, where, f"name {key!r}: {ident!r} is longer than {limits.max_id_length} characters"
        )


def _quantity(text: Any, where: str, limits: ApiLimits) -> Fraction:
    try:
        return parse_quantity(text)
    except (ValueError, TypeError):
        raise _fail(limits, where, f"{text!r} is not a quantity") from None


def _check_attribute(key: str, value: Any, where: str, limits: ApiLimits) -> None:
    _check_qualified_name(key, where, limits)
    kinds = [k for k in _VALUE_KINDS if isinstance(value, dict) and k in value]
    if len(kinds) != 1 or len(value) != 1:
        raise _fail(limits, where, f"attribute {key!r} must have exactly one of {', '.join(_VALUE_KINDS)}")
    v = value[kinds[0]]
    if kinds[0] in ("string", "version") and len(str(v)) > limits.max_attribute_value_length:
        raise _fail(
            limits,
            where,
            f"attribute {key!r} value is longer than {limits.max_attribute_value_length} characters",
        )
    if kinds[0] == "version" and not _SEMVER.match(str(v)):
        raise _fail(limits, where, f"attribute {key!r} version {v!r} is not semver 2.0")


def _check_request_policy(key: str, value: Fraction, policy: dict[str, Any], where: str, limits: ApiLimits):
    """The API server's rules for a consumable capacity's requestPolicy."""
    w = f"{where}: capacity {key!r} requestPolicy"
    valid_values, valid_range = policy.get("validValues"), policy.get("validRange")
    if valid_values and valid_range:
        raise _fail(limits, w, "validValues and validRange are mutually exclusive")
    default = _quantity(policy["default"], w, limits) if "default" in policy else None
    if valid_values:
        options = [_quantity(v, w, limits) for v in valid_values]
        if default is None or default not in options:
            raise _fail(limits, w, "default must be one of validValues")
        if options != sorted(options) or any(o > value for o in options):
            raise _fail(limits, w, "validValues must be ascending and not above the capacity value")
    elif valid_range:
        if default is None or "min" not in valid_range:
            raise _fail(limits, w, "validRange needs min and a default")
        lo = _quantity(valid_range["min"], w, limits)
        hi = _quantity(valid_range["max"], w, limits) if "max" in valid_range else None
        step = _quantity(valid_range["step"], w, limits) if "step" in valid_range else None
        if lo > value or default < lo or (hi is not None and (hi < lo or hi > value or default > hi)):
            raise _fail(limits, w, "must satisfy min <= default <= max <= capacity value")
        if step is not None:
            # 1.37 says so; older servers divide by the step and fail the same write.
            if step <= 0:
                raise _fail(limits, w, "step must be greater than zero")
            if lo + step > value:
                raise _fail(limits, w, "min + step exceeds the capacity value")
            for name, v in (("default", default), ("max", hi)):
                if v is not None and (v - lo) % step:
                    raise _fail(limits, w, f"{name} is not min plus a whole number of steps")


def _check_capacity(device: dict[str, Any], where: str, limits: ApiLimits) -> None:
    shared = bool(device.get("allowMultipleAllocations"))
    for key, cap in (device.get("capacity") or {}).items():
        _check_qualified_name(key, where, limits)
        value = _quantity(cap.get("value"), f"{where}: capacity {key!r}", limits)
        policy = cap.get("requestPolicy")
        if policy is not None:
            if not shared:
                raise _fail(
                    limits, where, f"capacity {key!r} has a requestPolicy without allowMultipleAllocations"
                )
            _check_request_policy(key, value, policy, where, limits)


def _check_taints(device: dict[str, Any], where: str, limits: ApiLimits) -> None:
    """The API server's rules for device taints: count, key (a label name), value (a label value), effect."""
    taints = device.get("taints") or []
    if len(taints) > limits.max_taints_per_device:
        raise _fail(limits, where, f"{len(taints)} taints, more than {limits.max_taints_per_device}")
    for i, taint in enumerate(taints):
        w = f"{where}: taints[{i}]"
        key = taint.get("key")
        if not isinstance(key, str) or not key:
            raise _fail(limits, w, "key is missing")
        prefix, sep, name = key.rpartition("/")
        if sep:
            _check_name(prefix, DNS_SUBDOMAIN, 253, w, f"prefix of key {key!r}", limits)
        if len(name) > 63 or not _LABEL_NAME.match(name):
            raise _fail(limits, w, f"key {key!r} is not a label name (at most 63 characters after a prefix)")
        value = taint.get("value") or ""
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise _fail(limits, w, f"value {value!r} is not a label value (at most 63 characters)")
        effect = taint.get("effect")
        if effect not in limits.taint_effects:
            raise _fail(limits, w, f"effect {effect!r} is not one of {', '.join(limits.taint_effects)}")


def _check_compatibility_groups(consumption: dict[str, Any], where: str, limits: ApiLimits) -> None:
    groups = consumption.get("compatibilityGroups")
    if not groups:
        return
    w = f"{where}: consumesCounters[{consumption.get('counterSet')}].compatibilityGroups"
    if limits.max_compatibility_groups is None:
        raise _fail(limits, w, "the field exists from Kubernetes 1.37 (DRADeviceCompatibilityGroups)")
    if len(groups) > limits.max_compatibility_groups:
        raise _fail(limits, w, f"{len(groups)} groups, more than {limits.max_compatibility_groups}")
    if len(set(groups)) != len(groups):
        raise _fail(limits, w, "group names must be unique")
    for g in groups:
        _check_name(g, _DNS_LABEL, 63, w, "group name", limits)


def _check_device(device: dict[str, Any], where: str, limits: ApiLimits) -> int:
    """Checks one device; returns how many counters it consumes."""
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if len(attributes) + len(capacity) > limits.max_attributes_and_capacities:
        raise _fail(
            limits,
            where,
            f"{len(attributes) + len(capacity)} attributes and capacities, more than "
            f"{limits.max_attributes_and_capacities}",
        )
    for key, value in attributes.items():
        _check_attribute(key, value, where, limits)
    _check_capacity(device, where, limits)
    _check_taints(device, where, limits)
    consumptions = device.get("consumesCounters") or []
    if (
        limits.max_consumptions_per_device is not None
        and len(consumptions) > limits.max_consumptions_per_device
    ):
        raise _fail(
            limits,
            where,
            f"{len(consumptions)} consumesCounters entries, more than {limits.max_consumptions_per_device}",
        )
    total = 0
    for c in consumptions:
        _check_compatibility_groups(c, where, limits)
        n = len(c.get("counters") or {})
        if limits.max_counters_per_consumption is not None and n > limits.max_counters_per_consumption:
            raise _fail(
                limits,
                where,
                f"consumesCounters[{c.get('counterSet')}] has {n} counters, more than "
                f"{limits.max_counters_per_consumption}",
            )
        total += n
    if (
        limits.max_consumed_counters_per_device is not None
        and total > limits.max_consumed_counters_per_device
    ):
        raise _fail(
            limits, where, f"consumes {total} counters, more than {limits.max_consumed_counters_per_device}"
        )
    return total


def _check_counter_sets(sets: list[dict[str, Any]], where: str, limits: ApiLimits) -> None:
    if limits.max_counter_sets_per_slice is not None and len(sets) > limits.max_counter_sets_per_slice:
        raise _fail(limits, where, f"{len(sets)} counter sets, more than {limits.max_counter_sets_per_slice}")
    total = 0
    for cs in sets:
        name = cs.get("name")
        _check_name(name, _DNS_LABEL, 63, where, "counter set name", limits)
        counters = cs.get("counters") or {}
        if not counters:
            raise _fail(limits, where, f"counter set {name!r} has no counters")
        if len(counters) > limits.max_counters_per_set:
            raise _fail(
                limits,
                where,
                f"counter set {name!r} has {len(counters)} counters, more than {limits.max_counters_per_set}",
            )
        for key, counter in counters.items():
            _check_name(key, _DNS_LABEL, 63, where, f"counter name in {name!r}", limits)
            _quantity(counter.get("value"), f"{where}: counter {name}/{key}", limits)
        total += len(counters)
    if limits.max_shared_counters_per_slice is not None and total > limits.max_shared_counters_per_slice:
        raise _fail(
            limits, where, f"{total} shared counters, more than {limits.max_shared_counters_per_slice}"
        )


def _check_references(device: dict[str, Any], sets: dict[str, dict[str, Any]], where: str, limits: ApiLimits):
    """Each consumed counter exists, in the slice (1.34) or the pool (1.35+), and fits in its counter."""
    for c in device.get("consumesCounters") or []:
        cs = sets.get(c.get("counterSet"))
        scope = "slice" if limits.counters_with_their_devices else "pool"
        if cs is None:
            raise _fail(
                limits, where, f"consumes counter set {c.get('counterSet')!r}, which is not in its {scope}"
            )
        for key, amount in (c.get("counters") or {}).items():
            if key not in cs["counters"]:
                raise _fail(limits, where, f"consumes counter {cs['name']}/{key}, which does not exist")
            need = _quantity(amount.get("value"), where, limits)
            if need > _quantity(cs["counters"][key]["value"], where, limits):
                raise _fail(limits, where, f"consumes more of {cs['name']}/{key} than it holds")


def validate_slices(slices: Iterable[dict[str, Any]], limits: ApiLimits) -> None:
    """Raise SliceLimitError for the first limit any slice or device breaks; silent when all are valid."""
    slices = list(slices)
    pools: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        pools.setdefault((spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")), []).append(s)
    for (driver, pool_name), members in pools.items():
        pool_where = f"pool {pool_name!r}"
        _check_name(driver, DNS_SUBDOMAIN, limits.max_driver_name_length, pool_where, "driver name", limits)
        if not pool_name or len(pool_name) > limits.max_pool_name_length:
            raise _fail(
                limits, pool_where, f"pool name must have 1..{limits.max_pool_name_length} characters"
            )
        for segment in pool_name.split("/"):
            _check_name(segment, DNS_SUBDOMAIN, limits.max_pool_name_length, pool_where, "pool name", limits)
        pool_sets: dict[str, dict[str, Any]] = {}
        device_names: set[str] = set()
        for s in members:
            where = f"slice {s.get('metadata', {}).get('name')!r}"
            spec = s["spec"]
            _check_name(
                s.get("metadata", {}).get("name"), DNS_SUBDOMAIN, 253, where, "metadata.name", limits
            )
            pool = spec.get("pool") or {}
            if pool.get("resourceSliceCount") != len(members):
                raise _fail(
                    limits,
                    where,
                    f"pool.resourceSliceCount {pool.get('resourceSliceCount')} does not match the "
                    f"{len(members)} slices of the pool",
                )
            generation = pool.get("generation")
            if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
                raise _fail(limits, where, f"pool.generation {generation!r} is not an integer >= 0")
            if not spec.get("nodeName"):
                raise _fail(limits, where, "nodeName is missing")
            devices = spec.get("devices") or []
            sets = spec.get("sharedCounters") or []
            if limits.counters_in_own_slice and devices and sets:
                raise _fail(limits, where, "holds both devices and sharedCounters")
            with_counters = any(d.get("consumesCounters") or d.get("taints") for d in devices)
            cap = limits.max_devices_with_counters_or_taints if with_counters else limits.max_devices
            if len(devices) > cap:
                why = " (devices consume counters or carry taints)" if with_counters else ""
                raise _fail(limits, where, f"{len(devices)} devices, more than {cap}{why}")
            _check_counter_sets(sets, where, limits)
            for cs in sets:
                if cs["name"] in pool_sets:
                    raise _fail(limits, where, f"counter set {cs['name']!r} appears twice in the pool")
                pool_sets[cs["name"]] = cs
            consumed = 0
            for d in devices:
                dwhere = f"{where}: device {d.get('name')!r}"
                _check_name(d.get("name"), _DNS_LABEL, 63, dwhere, "device name", limits)
                if d["name"] in device_names:
                    raise _fail(limits, dwhere, "device name appears twice in the pool")
                device_names.add(d["name"])
                consumed += _check_device(d, dwhere, limits)
                if limits.counters_with_their_devices:
                    _check_references(d, {cs["name"]: cs for cs in sets}, dwhere, limits)
            if (
                limits.max_consumed_counters_per_slice is not None
                and consumed > limits.max_consumed_counters_per_slice
            ):
                raise _fail(
                    limits,
                    where,
                    f"devices consume {consumed} counters, "
                    f"more than {limits.max_consumed_counters_per_slice}",
                )
        if not limits.counters_with_their_devices:
            for s in members:
                for d in s["spec"].get("devices") or []:
                    _check_references(
                        d, pool_sets, f"slice {s['metadata']['name']!r}: device {d['name']!r}", limits
                    )
