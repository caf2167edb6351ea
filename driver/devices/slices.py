"""A node's devices as ResourceSlices (resource.k8s.io/v1, plain dicts), cut to fit one version's limits.

One pool per node (pool name = node name). The devices of one GPU stay in one slice whenever they fit,
so a reader sees a GPU whole; on 1.34 a GPU's counter set must share the slice of the devices that
consume it, on 1.35+ counter sets go in slices of their own, first. Slice names carry a zero-padded
index because the 1.36 scheduler visits slices by name: name order is device preference order.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from driver import names
from driver.devices import DEFAULT_STRATEGY, devices_for
from driver.devices.base import CounterSet, Device, DeviceSet, ModelError, Settings
from driver.devices.limits import DNS_SUBDOMAIN, ApiLimits, limits_for, validate_slices
from driver.devices.mig import LayoutSlot, within_layout
from driver.gpu.model import Gpu

API_VERSION = "resource.k8s.io/v1"


@dataclass
class _Chunk:
    devices: list[Device] = field(default_factory=list)
    counter_sets: list[CounterSet] = field(default_factory=list)


def slice_name(node_name: str, k: int) -> str:
    """`<node>-gpu.carve.dev-<k:03>`; a node name too long for that is shortened with a hash suffix."""
    suffix = f"-{names.DRIVER_NAME}-{k:03d}"
    if len(node_name) + len(suffix) <= 253:
        return node_name + suffix
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    return f"{node_name[: 253 - len(suffix) - 11].rstrip('.-')}-{digest}{suffix}"


def device_sets(
    gpus: list[Gpu],
    strategies: dict[int, str],
    settings: Settings | None = None,
    layouts: Mapping[int, Sequence[LayoutSlot]] | None = None,
) -> list[DeviceSet]:
    """Each GPU's DeviceSet, in GPU index order; GPUs missing from `strategies` get the default. A MIG
    GPU with a layout in `layouts` (by index) publishes only that layout's devices (mig.within_layout)."""
    settings = settings or Settings()
    out = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        ds = devices_for(gpu, strategies.get(gpu.index, DEFAULT_STRATEGY), settings)
        layout = (layouts or {}).get(gpu.index)
        if layout and ds.strategy == names.STRATEGY_MIG:
            ds = within_layout(ds, layout)
        out.append(ds)
    return out


def _consumed(devices: list[Device]) -> int:
    return sum(len(c["counters"]) for d in devices for c in d.get("consumesCounters") or [])


def _device_cap(limits: ApiLimits, devices: list[Device]) -> int:
    counters = any(d.get("consumesCounters") or d.get("taints") for d in devices)
    return limits.max_devices_with_counters_or_taints if counters else limits.max_devices


def _fits(limits: ApiLimits, chunk: _Chunk, ds: DeviceSet) -> bool:
    devices = chunk.devices + list(ds.devices)
    if len(devices) > _device_cap(limits, devices):
        return False
    if limits.counters_with_their_devices:
        sets = chunk.counter_sets + list(ds.counter_sets)
        if (
            limits.max_shared_counters_per_slice is not None
            and sum(len(s["counters"]) for s in sets) > limits.max_shared_counters_per_slice
        ):
            return False
        if limits.max_consumed_counters_per_slice is not None and _consumed(devices) > (
            limits.max_consumed_counters_per_slice
        ):
            return False
    return True


def _device_chunks(limits: ApiLimits, sets: list[DeviceSet]) -> list[_Chunk]:
    chunks: list[_Chunk] = []
    current = _Chunk()
    for ds in sets:
        if not _fits(limits, current, ds):
            if current.devices:
                chunks.append(current)
            current = _Chunk()
        if _fits(limits, current, ds):
            current.devices.extend(ds.devices)
            if limits.counters_with_their_devices:
                current.counter_sets.extend(ds.counter_sets)
            continue
        # One GPU alone is too big for a slice (many slots). Devices without counters can be spread over
        # several slices; a GPU whose counters must travel with its devices (1.34) cannot.
        if ds.consumes_counters and limits.counters_with_their_devices:
            raise ModelError(
                f"{ds.gpu.name} ({ds.gpu.product}): {len(ds.devices)} {ds.strategy} devices and their "
                f"counters "
                f"do not fit in one ResourceSlice on Kubernetes {limits.version}"
            )
        cap = _device_cap(limits, list(ds.devices))
        for i in range(0, len(ds.devices), cap):
            chunks.append(_Chunk(devices=list(ds.devices[i : i + cap])))
    if current.devices:
        chunks.append(current)
    return chunks


def _counter_chunks(limits: ApiLimits, sets: list[DeviceSet]) -> list[_Chunk]:
    if limits.counters_with_their_devices:
        return []
    all_sets = [cs for ds in sets for cs in ds.counter_sets]
    per = limits.max_counter_sets_per_slice or len(all_sets) or 1
    return [_Chunk(counter_sets=all_sets[i : i + per]) for i in range(0, len(all_sets), per)]


def _tainted(ds: DeviceSet, taints: Sequence[dict[str, Any]] | None) -> DeviceSet:
    if not taints:
        return ds
    return dataclasses.replace(
        ds, devices=tuple({**d, "taints": [dict(t) for t in taints]} for d in ds.devices)
    )


def _without_bookkeeping(ds: DeviceSet) -> DeviceSet:
    """A time-sliced GPU as a scheduler whose capacity check reads the wrong device can serve it
    (ApiLimits.capacity_checked_on_wrong_device, 1.34): shared, without the `slots`/`memory` bookkeeping.
    That check passes a request without capacity requests on any device that holds no share; with the
    bookkeeping, every share would be charged against the slice's first device and one GPU per slice
    would take sharers. The price: no bound on sharers or memory per GPU (the scheduler cannot keep one)."""
    if ds.strategy != names.STRATEGY_TIMESLICE:
        return ds
    return dataclasses.replace(ds, devices=tuple({k: v for k, v in d.items() if k != "capacity"}
                                                 for d in ds.devices))


def build_slices(
    node_name: str,
    gpus: list[Gpu],
    strategies: dict[int, str],
    settings: Settings | None = None,
    k8s_version: str = "1.34",
    generation: int = 1,
    validate: bool = True,
    layouts: Mapping[int, Sequence[LayoutSlot]] | None = None,
    taints: Mapping[int, Sequence[dict[str, Any]]] | None = None,
    withdrawn: frozenset[int] = frozenset(),
) -> list[dict[str, Any]]:
    """The ResourceSlices of one node's pool, validated against the version's limits before returning
    (validate=False skips that check, for simulations that build thousands of known-good nodes).

    Health (driver/plugin/health/): every device of a GPU index in `taints` carries those device taints
    (counted against the smaller per-slice device limit of tainted devices); a GPU in `withdrawn` is left
    out of the pool, counter sets included."""
    if not node_name or len(node_name) > 253 or not DNS_SUBDOMAIN.match(node_name):
        raise ModelError(
            f"node name {node_name!r}: not a DNS subdomain (lower-case letters, digits, '-' and '.', "
            "at most 253 characters); it names the pool and the slices"
        )
    if generation < 0:
        raise ModelError(f"pool generation {generation}: must not be negative")
    limits = limits_for(k8s_version)
    sets = [
        _tainted(ds, (taints or {}).get(ds.gpu.index))
        for ds in device_sets([g for g in gpus if g.index not in withdrawn], strategies, settings, layouts)
    ]
    if limits.capacity_checked_on_wrong_device:
        sets = [_without_bookkeeping(ds) for ds in sets]
    chunks = _counter_chunks(limits, sets) + _device_chunks(limits, sets)
    if not chunks:
        chunks = [_Chunk()]  # a node without GPUs still publishes its (empty) pool
    slices = []
    for k, chunk in enumerate(chunks):
        spec: dict[str, Any] = {
            "driver": names.DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
        }
        # Empty lists are left out: the API treats a present `devices: []` as set, which 1.35+
        # forbids next to sharedCounters.
        if chunk.devices:
            spec["devices"] = chunk.devices
        if chunk.counter_sets:
            spec["sharedCounters"] = chunk.counter_sets
        slices.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ResourceSlice",
                "metadata": {"name": slice_name(node_name, k)},
                "spec": spec,
            }
        )
    if validate:
        validate_slices(slices, limits)
    return slices
