"""`mig`: partitionable devices (DRAPartitionableDevices): every MIG placement NVML reports + the whole GPU.

One counter set per GPU (`gpu-<minor>-counters`) holds what placements compete for:
  memory-slice-<i>        1 each: a placement consumes the slices it covers, so overlapping placements
                          exclude each other by simple counter arithmetic, exactly as NVML refuses them;
  memory, multiprocessors the GPU's totals, consumed by each profile's memory and SMs;
  compute-slices          the GPU's compute slices (7 on A100/H100), consumed by each profile's slices;
  profile-<id>-instances  only for profiles NVML limits below their placement count (e.g. one `+me`
                          instance per GPU): NVML's instanceCount.
The whole GPU consumes every counter in full, so it conflicts with every MIG device.

Device names: `gpu-<minor>-mig-<profile>-<start>`, the profile name without dots and plus signs:
`1g.10gb` at slice 3 -> `gpu-0-mig-1g10gb-3`, `1g.10gb+me` -> `gpu-0-mig-1g10gbme-0`,
`1g.24gb+me.all` -> `...-1g24gbmeall-...`, `1g.24gb-me` -> `...-1g24gb-me-...` (the minus stays, so
`+me` and `-me` never collide).
Nothing here is a MIG table: profiles and placements come from the Gpu record, i.e. from NVML.

A GPU with a MIG layout (a NodePartitioning's `migLayout`: profiles, each at a placement or at any) publishes
only the MIG devices of that layout (`within_layout`), and not the whole GPU: the layout is what the GPU is
for. The counter set stays the GPU's, so overlapping entries still exclude each other.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from driver import names
from driver.devices.attributes import common_attributes, fixed_capacity, quantity, string
from driver.devices.base import Device, DeviceSet, ModelError, Settings
from driver.gpu.model import Gpu, MigPlacement, MigProfile


def counter_set_name(gpu: Gpu) -> str:
    return f"{gpu.name}-counters"


def profile_slug(profile_name: str) -> str:
    """'1g.10gb+me' -> '1g10gbme': a DNS-label-safe form of an NVML profile name."""
    slug = profile_name.lower().replace(".", "").replace("+", "")
    return re.sub(r"[^a-z0-9-]", "-", slug).strip("-")


def mig_device_name(gpu: Gpu, profile: MigProfile, placement: MigPlacement) -> str:
    return f"{gpu.name}-mig-{profile_slug(profile.name)}-{placement.start}"


def slice_counter(i: int) -> str:
    return f"memory-slice-{i}"


def instance_counter(profile: MigProfile) -> str:
    return f"profile-{profile.id}-instances"


def _limited(profile: MigProfile) -> bool:
    return 0 < profile.max_instances < len(profile.placements)


def _compute_slices(gpu: Gpu) -> int:
    return max(p.compute_slices for p in gpu.mig_profiles)


def _rank(profile: MigProfile) -> tuple[int, int]:
    return (profile.memory_slices, profile.compute_slices)


def placement_order(gpu: Gpu, profile: MigProfile) -> list[MigPlacement]:
    """The profile's placements, least damaging first.

    The scheduler allocates first-fit: for a request it takes the first free device in slice order. If
    small instances took slice 0 first they would at once block the 4g (slices 0-3) and the 7g, and every
    3g at 0; packed from the top, they leave the big aligned blocks at the bottom free for as long as
    possible. "Damage" is measured, not assumed, from NVML's own placements: a placement's score is the
    total size of the placements of larger profiles it overlaps (the big blocks it would destroy). Lowest
    score first; ties go to the higher start, which keeps packing towards the top. On an A100 this gives
    1g: 6,5,4,3,2,1,0; 1g.10gb: 6,4,2,0; 2g: 4,2,0; 3g: 4,0.
    """
    larger = [q for other in gpu.mig_profiles if _rank(other) > _rank(profile) for q in other.placements]

    def score(p: MigPlacement) -> tuple[int, int]:
        blocked = sum(q.size for q in larger if q.start < p.start + p.size and p.start < q.start + q.size)
        return (blocked, -p.start)

    return sorted(profile.placements, key=score)


def _counters(gpu: Gpu) -> dict[str, dict[str, str]]:
    counters = {
        "memory": {"value": quantity(gpu.memory_bytes)},
        "multiprocessors": {"value": str(gpu.multiprocessors)},
        "compute-slices": {"value": str(_compute_slices(gpu))},
    }
    for i in range(gpu.memory_slice_count):
        counters[slice_counter(i)] = {"value": "1"}
    for profile in gpu.mig_profiles:
        if _limited(profile):
            counters[instance_counter(profile)] = {"value": str(profile.max_instances)}
    return counters


def _mig_device(gpu: Gpu, profile: MigProfile, placement: MigPlacement) -> Device:
    attributes = common_attributes(gpu, names.TYPE_MIG)
    attributes.update(
        profile=string(profile.name),
        profileId={"int": profile.id},
        placementStart={"int": placement.start},
        placementSize={"int": placement.size},
    )
    consumed = {
        "memory": {"value": quantity(profile.memory_bytes)},
        "multiprocessors": {"value": str(profile.multiprocessors)},
        "compute-slices": {"value": str(profile.compute_slices)},
    }
    for i in placement.slices:
        consumed[slice_counter(i)] = {"value": "1"}
    if _limited(profile):
        consumed[instance_counter(profile)] = {"value": "1"}
    return {
        "name": mig_device_name(gpu, profile, placement),
        "attributes": attributes,
        "capacity": fixed_capacity(profile.memory_bytes, profile.multiprocessors),
        "consumesCounters": [{"counterSet": counter_set_name(gpu), "counters": consumed}],
    }


def _whole_gpu(gpu: Gpu, counters: dict[str, dict[str, str]]) -> Device:
    # Every counter in full, so the whole GPU excludes (and is excluded by) any MIG device: the memory
    # slices alone would do that, but "all of them" keeps the rule obvious to a reader of the slice.
    return {
        "name": gpu.name,
        "attributes": common_attributes(gpu, names.TYPE_GPU),
        "capacity": fixed_capacity(gpu.memory_bytes, gpu.multiprocessors),
        "consumesCounters": [{"counterSet": counter_set_name(gpu), "counters": dict(counters)}],
    }


class Mig:
    name = names.STRATEGY_MIG

    def check(self, gpu: Gpu) -> None:
        if not gpu.mig_capable:
            raise ModelError(f"{gpu.name} ({gpu.product}) has no MIG support; choose another strategy for it")
        if not any(p.placements for p in gpu.mig_profiles):
            raise ModelError(f"{gpu.name} ({gpu.product}): NVML reports no MIG profile placements")

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        counters = _counters(gpu)
        # Smallest profile first: a request that any MIG device satisfies gets the smallest one that fits.
        profiles = sorted(gpu.mig_profiles, key=lambda p: (_rank(p), p.memory_bytes, p.id))
        devices = [
            _mig_device(gpu, profile, placement)
            for profile in profiles
            for placement in placement_order(gpu, profile)
        ]
        devices.append(_whole_gpu(gpu, counters))
        counter_set = {"name": counter_set_name(gpu), "counters": counters}
        return DeviceSet(gpu=gpu, strategy=self.name, devices=tuple(devices), counter_sets=(counter_set,))


LayoutSlot = tuple[str, int | None]  # (profile name, placement start or None: any placement)


def within_layout(ds: DeviceSet, layout: Iterable[LayoutSlot]) -> DeviceSet:
    """The MIG DeviceSet `ds` cut down to the devices of `layout`: each slot keeps the devices of its
    profile at its placement (None: at every placement); the whole GPU and every other device go. The
    order of `ds` (smallest profile first, least damaging placement first) is kept."""
    if ds.strategy != names.STRATEGY_MIG:
        raise ModelError(f"{ds.gpu.name}: a MIG layout applies to strategy mig only, not {ds.strategy}")
    slots = list(layout)
    wanted = {(p, at) for p, at in slots if at is not None}
    anywhere = {p for p, at in slots if at is None}

    def kept(device: Device) -> bool:
        attrs = device["attributes"]
        if attrs.get("profile") is None:
            return False  # the whole GPU
        profile, start = attrs["profile"]["string"], attrs["placementStart"]["int"]
        return profile in anywhere or (profile, start) in wanted

    return dataclasses.replace(ds, devices=tuple(d for d in ds.devices if kept(d)))
