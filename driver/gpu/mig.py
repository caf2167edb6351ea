"""MIG operations the kubelet plugin performs at prepare/unprepare time, through pynvml.

create_mig_instance is idempotent by default (an instance of the same profile at the same placement is
reused, also when another process created it a moment earlier); with reuse=False, as the kubelet plugin
calls it, an instance already there is an error, since carve never adopts an instance it did not record.
destroy_mig_instance is a no-op for an instance that is gone, and with `uuid` refuses to destroy a GPU
instance whose MIG device is not the recorded one. Errors are InventoryError subclasses naming the GPU
and the profile/placement. NVML itself serialises concurrent processes (the fake library does so through
its state file); the lock here only keeps this process's threads from interleaving a check-then-create.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import pynvml

from driver.gpu.model import InventoryError, MigInstance, MigPlacement, MigProfile
from driver.gpu.nvml import (
    call,
    compute_instances,
    handle_by_uuid,
    mig_mode,
    read_instance,
    read_instances,
    read_profiles,
)

_lock = threading.RLock()


class MigError(InventoryError):
    """A MIG operation failed on a GPU."""


class MigModeError(MigError):
    """The GPU is not in MIG mode (or cannot be switched to it)."""


class MigProfileError(MigError):
    """The GPU has no such MIG profile, or no such placement for it."""


class MigPlacementError(MigError):
    """The placement is taken: it overlaps a live GPU instance."""


class MigOwnershipError(MigError):
    """The instance found is not the one recorded (another UUID at the recorded ids)."""


def _profile(gpu_uuid: str, profiles: tuple[MigProfile, ...], wanted: int | str) -> MigProfile:
    for p in profiles:
        if p.id == wanted or p.name == wanted or str(p.id) == str(wanted):
            return p
    known = ", ".join(f"{p.name} (id {p.id})" for p in profiles) or "none"
    raise MigProfileError(f"GPU {gpu_uuid}: no MIG profile {wanted!r}; profiles: {known}")


def _placement(gpu_uuid: str, profile: MigProfile, start: int) -> MigPlacement:
    for p in profile.placements:
        if p.start == start:
            return p
    starts = ", ".join(str(p.start) for p in profile.placements)
    raise MigProfileError(
        f"GPU {gpu_uuid}: profile {profile.name} has no placement at {start} (starts: {starts})"
    )


def _require_mig_mode(gpu_uuid: str, handle: Any) -> None:
    capable, enabled, _pending = mig_mode(f"GPU {gpu_uuid}", handle)
    if not capable:
        raise MigModeError(f"GPU {gpu_uuid}: has no MIG support")
    if not enabled:
        raise MigModeError(f"GPU {gpu_uuid}: MIG mode is disabled; enable it first")


def _full_compute_profile(what: str, gi: Any, slices: int) -> int:
    """The id of the compute-instance profile that spans the whole GPU instance."""
    best: tuple[int, int] | None = None
    for index in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, index, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except pynvml.NVMLError:
            continue
        if info.sliceCount <= slices and (best is None or info.sliceCount > best[0]):
            best = (info.sliceCount, info.id)
    if best is None:
        raise MigError(f"{what}: NVML reports no compute-instance profile")
    return best[1]


def _existing(what: str, handle: Any, profile: MigProfile, placement: MigPlacement) -> Any | None:
    for inst in read_instances(what, handle, (profile,)):
        if inst.placement == placement:
            return call(what, pynvml.nvmlDeviceGetGpuInstanceById, handle, inst.gpu_instance_id)
    return None


def _ensure_compute_instance(what: str, gi: Any, profile: MigProfile) -> None:
    if compute_instances(what, gi):
        return
    ci_profile = _full_compute_profile(what, gi, profile.compute_slices)
    try:
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
    except pynvml.NVMLError_InsufficientResources:
        if not compute_instances(what, gi):  # another process may have just created it
            raise MigError(f"{what}: cannot create a compute instance") from None
    except pynvml.NVMLError as e:
        raise MigError(f"{what}: nvmlGpuInstanceCreateComputeInstance: {e}") from None


def create_mig_instance(
    gpu_uuid: str, profile: int | str, placement_start: int, reuse: bool = True
) -> MigInstance:
    """A MIG device of `profile` (id or name) at `placement_start` on the GPU.

    reuse: an instance of that profile already at that placement is returned (True) or is an error (False).
    """
    with _lock:
        handle = handle_by_uuid(gpu_uuid)
        _require_mig_mode(gpu_uuid, handle)
        profiles = read_profiles(f"GPU {gpu_uuid}", handle)
        prof = _profile(gpu_uuid, profiles, profile)
        placement = _placement(gpu_uuid, prof, placement_start)
        what = f"GPU {gpu_uuid}: MIG {prof.name} at {placement.start}:{placement.size}"
        gi = _existing(what, handle, prof, placement)
        if gi is not None and not reuse:
            raise MigPlacementError(f"{what}: an instance is already there and this call did not create it")
        if gi is None:
            c_placement = pynvml.c_nvmlGpuInstancePlacement_t(placement.start, placement.size)
            try:
                # pynvml passes `placement` through as is; the C function takes a pointer to it.
                ref = ctypes.byref(c_placement)
                gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, prof.id, ref)
            except pynvml.NVMLError_InsufficientResources:
                gi = _existing(what, handle, prof, placement)  # lost a race to an identical request
                if gi is not None and not reuse:
                    raise MigPlacementError(f"{what}: another process created an instance there") from None
                if gi is None:
                    taken = [
                        f"{m.profile_name} at {m.placement.start}:{m.placement.size}"
                        for m in read_instances(what, handle, profiles)
                    ]
                    raise MigPlacementError(
                        f"{what}: placement overlaps live instances ({', '.join(taken) or 'none visible'})"
                    ) from None
            except pynvml.NVMLError as e:
                raise MigError(f"{what}: nvmlDeviceCreateGpuInstanceWithPlacement: {e}") from None
        try:
            _ensure_compute_instance(what, gi, prof)
        except MigError:
            _destroy_gpu_instance(what, gi)  # leave no half-made instance behind
            raise
        return read_instance(what, handle, prof, gi)


def _destroy_gpu_instance(what: str, gi: Any) -> None:
    for ci in compute_instances(what, gi):
        try:
            pynvml.nvmlComputeInstanceDestroy(ci)
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            pass
        except pynvml.NVMLError as e:
            raise MigError(f"{what}: nvmlComputeInstanceDestroy: {e}") from None
    try:
        pynvml.nvmlGpuInstanceDestroy(gi)
    except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
        pass
    except pynvml.NVMLError as e:
        raise MigError(f"{what}: nvmlGpuInstanceDestroy: {e}") from None


def destroy_mig_instance(
    gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None = None, uuid: str | None = None
) -> None:
    """Destroy a GPU instance and its compute instances; nothing happens when it does not exist.

    With `uuid` (the MIG device UUID recorded at creation) the instance is destroyed only if its MIG device
    at (gpu_instance_id, compute_instance_id) still has that UUID; else MigOwnershipError, nothing destroyed.
    """
    with _lock:
        handle = handle_by_uuid(gpu_uuid)
        what = f"GPU {gpu_uuid}: GPU instance {gpu_instance_id}"
        try:
            gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, gpu_instance_id)
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            return
        except pynvml.NVMLError as e:
            raise MigError(f"{what}: nvmlDeviceGetGpuInstanceById: {e}") from None
        if uuid is not None:
            live = {
                m.uuid: m
                for m in read_instances(what, handle, read_profiles(what, handle))
                if m.gpu_instance_id == gpu_instance_id
            }
            found = live.get(uuid)
            if found is None or compute_instance_id not in (None, found.compute_instance_id):
                raise MigOwnershipError(
                    f"{what}: holds {', '.join(sorted(live)) or 'no MIG device'}, not the recorded {uuid} "
                    f"(compute instance {compute_instance_id}); left alone"
                )
        _destroy_gpu_instance(what, gi)


def list_mig_instances(gpu_uuid: str) -> tuple[MigInstance, ...]:
    """The live MIG instances of a GPU (empty when MIG mode is off)."""
    with _lock:
        handle = handle_by_uuid(gpu_uuid)
        what = f"GPU {gpu_uuid}"
        _capable, enabled, _pending = mig_mode(what, handle)
        if not enabled:
            return ()
        return read_instances(what, handle, read_profiles(what, handle))


def get_mig_mode(gpu_uuid: str) -> tuple[bool, bool | None]:
    """(current, pending or None when no change is pending); MigModeError for a GPU without MIG."""
    with _lock:
        what = f"GPU {gpu_uuid}"
        capable, current, pending = mig_mode(what, handle_by_uuid(gpu_uuid))
        if not capable:
            raise MigModeError(f"{what}: has no MIG support")
        return current, pending if pending != current else None


def set_mig_mode(gpu_uuid: str, enabled: bool) -> tuple[bool, bool | None]:
    """Ask for MIG mode on or off (needs root on real hardware); returns (current, pending or None).

    NVML keeps the change pending while the GPU is in use (or until a reset on some GPUs); the caller sees
    that as current != enabled. Disabling over live GPU instances is refused by the driver the same way.
    """
    with _lock:
        handle = handle_by_uuid(gpu_uuid)
        what = f"GPU {gpu_uuid}"
        capable, current, pending = mig_mode(what, handle)
        if not capable:
            raise MigModeError(f"{what}: has no MIG support")
        if current != enabled or pending != enabled:
            mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
            try:
                pynvml.nvmlDeviceSetMigMode(handle, mode)
            except pynvml.NVMLError as e:
                raise MigModeError(f"{what}: nvmlDeviceSetMigMode({int(enabled)}): {e}") from None
            _capable, current, pending = mig_mode(what, handle)
        return current, pending if pending != current else None


def enable_mig(gpu_uuid: str) -> None:
    """Switch the GPU to MIG mode (needs root on real hardware); no-op when already on."""
    with _lock:
        handle = handle_by_uuid(gpu_uuid)
        what = f"GPU {gpu_uuid}"
        capable, enabled, _ = mig_mode(what, handle)
        if not capable:
            raise MigModeError(f"{what}: has no MIG support")
        if enabled:
            return
        try:
            pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
        except pynvml.NVMLError as e:
            raise MigModeError(f"{what}: cannot enable MIG mode: {e}") from None
        if not mig_mode(what, handle)[1]:
            raise MigModeError(f"{what}: MIG mode is pending (the GPU is in use or needs a reset)")
