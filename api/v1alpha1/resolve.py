"""Which opaque config applies to one allocated device: Kubernetes precedence plus carve's kind check.

Kubernetes passes a driver every config entry that may concern a claim: those of the DeviceClass first,
then those of the claim (`status.allocation.devices.config` keeps that order and marks each entry
`FromClass` or `FromClaim`). An entry applies to a request when its `requests` list is empty or names the
request; a subrequest `main/sub` is also matched by its main request's name. Among the class entries
for this driver that apply, the last one is the base; the last applying claim entry changes the fields it
sets, within the class's bounds (policy.py). Each applying entry is parsed, so an invalid config is
reported even when a later one would have won, and each must be the kind that fits the device type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from api.v1alpha1.config import (
    KIND_GPU_CONFIG,
    KIND_SLICE_CONFIG,
    Config,
    ConfigError,
    GpuConfig,
    SliceConfig,
    parse_config,
)
from api.v1alpha1.policy import bound, check_claim_entry
from driver.names import DRIVER_NAME, TYPE_GPU, TYPE_MIG, TYPE_MPS, TYPE_SLOT, TYPE_TIMESLICE, TYPE_VGPU

# Device type -> the one config kind that fits it.
KIND_FOR_TYPE: dict[str, str] = {
    TYPE_GPU: KIND_GPU_CONFIG,
    TYPE_MIG: KIND_GPU_CONFIG,
    TYPE_TIMESLICE: KIND_GPU_CONFIG,
    TYPE_VGPU: KIND_SLICE_CONFIG,
    TYPE_SLOT: KIND_SLICE_CONFIG,
    TYPE_MPS: KIND_SLICE_CONFIG,
}

SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"


def request_matches(requests: Sequence[str] | None, request_name: str) -> bool:
    """True when a config entry with this `requests` list applies to `request_name` (maybe `main/sub`)."""
    if not requests:
        return True
    main = request_name.split("/", 1)[0]
    return request_name in requests or main in requests


def default_config(device_type: str) -> Config:
    """The config a device gets when no entry applies."""
    kind = _kind_for(device_type)
    return GpuConfig() if kind == KIND_GPU_CONFIG else SliceConfig()


def split_allocation_config(entries: Iterable[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
    """`status.allocation.devices.config` -> (class entries, claim entries), each in its original order."""
    from_class: list[dict] = []
    from_claim: list[dict] = []
    for entry in entries:
        (from_class if entry.get("source") == SOURCE_CLASS else from_claim).append(dict(entry))
    return from_class, from_claim


def resolve_configs(
    class_configs: Sequence[Mapping[str, Any]] | None,
    claim_configs: Sequence[Mapping[str, Any]] | None,
    request_name: str,
    device_type: str,
    class_name: str = "",
    claim_indices: Sequence[int] | None = None,
) -> Config:
    """The config for one device allocated for `request_name`; the type's default when none applies.

    Entries are in the Kubernetes JSON shape: `{"requests": [...], "opaque": {"driver", "parameters"}}`.
    The last applying class entry is the base (whole: its unset fields take defaults); the last applying
    claim entry changes the fields it sets, within what `class_name`'s claimPolicy allows
    (api/v1alpha1/policy.py). `claim_indices[i]` is the position of claim entry i in the claim's
    `spec.devices.config`, for messages (default: its position here). Raises ConfigError naming the entry
    (`class config[i]` / `claim config[i]`), the field and the value.
    """
    want = _kind_for(device_type)
    base: Config | None = None
    for index, entry in enumerate(class_configs or ()):
        parsed = _applying(f"class config[{index}]", entry, request_name, device_type, want)
        if parsed is not None:
            base = parsed
    claim: Config | None = None
    claim_where = ""
    for index, entry in enumerate(claim_configs or ()):
        where = f"claim config[{claim_indices[index] if claim_indices else index}]"
        parsed = _applying(where, entry, request_name, device_type, want)
        if parsed is not None:
            check_claim_entry(parsed, where)
            claim, claim_where = parsed, where
    return bound(claim, base if base is not None else default_config(device_type), class_name, claim_where)


def claim_config_indices(
    spec_configs: Sequence[Mapping[str, Any]] | None, claim_entries: Sequence[Mapping[str, Any]]
) -> list[int]:
    """For each FromClaim entry of the allocation, its index in the claim's `spec.devices.config`.

    Kubernetes copies into the allocation only the claim entries that apply to allocated requests, so
    positions differ; users know theirs. An entry not found keeps its allocation position.
    """
    spec = list(spec_configs or ())
    used: set[int] = set()
    out = []
    for position, entry in enumerate(claim_entries):
        key = (entry.get("opaque"), list(entry.get("requests") or ()))
        found = next(
            (
                j
                for j, s in enumerate(spec)
                if j not in used and (s.get("opaque"), list(s.get("requests") or ())) == key
            ),
            None,
        )
        if found is not None:
            used.add(found)
        out.append(found if found is not None else position)
    return out


def request_class(spec_requests: Sequence[Mapping[str, Any]] | None, request_name: str) -> str:
    """The DeviceClass a claim's request (`main` or `main/sub`) names in its spec; "" when not found."""
    main, _, sub = request_name.partition("/")
    for request in spec_requests or ():
        if request.get("name") != main:
            continue
        if not sub:
            return str((request.get("exactly") or {}).get("deviceClassName") or "")
        for alternative in request.get("firstAvailable") or ():
            if alternative.get("name") == sub:
                return str(alternative.get("deviceClassName") or "")
    return ""


def _applying(
    where: str, entry: Mapping[str, Any], request_name: str, device_type: str, want: str
) -> Config | None:
    """The parsed config of an entry that applies to this device; None for one that does not."""
    opaque = entry.get("opaque")
    # Entries of other drivers (or non-opaque kinds a newer API may add) are not ours to judge.
    if not isinstance(opaque, Mapping) or opaque.get("driver") != DRIVER_NAME:
        return None
    if not request_matches(entry.get("requests"), request_name):
        return None
    config = _parse_entry(where, opaque.get("parameters"))
    _check_fits(where, config, device_type, want)
    return config


def _kind_for(device_type: str) -> str:
    try:
        return KIND_FOR_TYPE[device_type]
    except KeyError:
        raise ConfigError(
            f"device type {device_type!r} is not one of {', '.join(KIND_FOR_TYPE)}", value=device_type
        ) from None


def _parse_entry(where: str, parameters: Any) -> Config:
    if parameters is None:
        raise ConfigError("required field is missing", field="opaque.parameters", where=where)
    try:
        return parse_config(parameters)
    except ConfigError as e:
        raise e.within(where, "opaque.parameters") from None


def _check_fits(where: str, config: Config, device_type: str, want: str) -> None:
    if config.kind != want:
        raise ConfigError(
            f"{config.kind} does not fit device type {device_type} (use {want})",
            field="opaque.parameters.kind",
            value=config.kind,
            where=where,
        )
    # The time-slice length is a property of the physical GPU (nvidia-smi compute-policy), so a MIG
    # device, one of several on that GPU, cannot choose it.
    if device_type == TYPE_MIG and isinstance(config, GpuConfig) and config.sharing.timeSlicing is not None:
        raise ConfigError(
            "not valid on a mig device (the interval is set per physical GPU)",
            field="opaque.parameters.sharing.timeSlicing",
            value=config.sharing.timeSlicing.model_dump(),
            where=where,
        )
