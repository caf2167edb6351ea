"""The environment contract between the plugin and the limiter (docs/limiter.md, DESIGN.md).

This module owns the mapping from a claim's limits to the CARVE_* variables the limiter reads, and the
validation of those limits. It is pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from driver import names

CORE_POLICIES = ("default", "force", "disable")
PRIORITIES = ("high", "low")
OOM_POLICIES = ("error", "kill")
MAX_DEVICES = 16  # CARVE_MAX_DEVICES in native/include/carve_region.h


class LimitsError(ValueError):
    """Limits that the limiter cannot enforce; the message names the field."""


@dataclass(frozen=True)
class DeviceLimit:
    memory_bytes: int  # 0 = no memory limit
    cores_percent: int  # 0 = no compute limit (no throttle), else 1..100
    uuid: str = ""  # the GPU's UUID when known: lets the limiter map NVML handles to this device


@dataclass(frozen=True)
class ClaimLimits:
    devices: tuple[DeviceLimit, ...]  # in CUDA ordinal order of the container's visible devices
    region_path: str  # path INSIDE the container of the region file
    core_policy: str = "default"  # default|force|disable
    priority: str = "high"  # high|low
    oom_policy: str = "error"  # error|kill


def validate(limits: ClaimLimits) -> None:
    """Raise LimitsError naming the first field that the limiter could not honour."""
    if not limits.devices:
        raise LimitsError("limits.devices: at least one device is required")
    if len(limits.devices) > MAX_DEVICES:
        raise LimitsError(f"limits.devices: {len(limits.devices)} devices, at most {MAX_DEVICES}")
    for i, dev in enumerate(limits.devices):
        if isinstance(dev.memory_bytes, bool) or not isinstance(dev.memory_bytes, int):
            raise LimitsError(f"limits.devices[{i}].memory_bytes: {dev.memory_bytes!r} is not an integer")
        if dev.memory_bytes < 0 or dev.memory_bytes >= 1 << 64:
            raise LimitsError(f"limits.devices[{i}].memory_bytes: {dev.memory_bytes} is out of range")
        if isinstance(dev.cores_percent, bool) or not isinstance(dev.cores_percent, int):
            raise LimitsError(f"limits.devices[{i}].cores_percent: {dev.cores_percent!r} is not an integer")
        if not 0 <= dev.cores_percent <= 100:
            raise LimitsError(f"limits.devices[{i}].cores_percent: {dev.cores_percent} is not in 0..100")
        if len(dev.uuid.encode()) >= 48:
            raise LimitsError(f"limits.devices[{i}].uuid: {dev.uuid!r} is longer than 47 bytes")
    if not limits.region_path.startswith("/"):
        raise LimitsError(f"limits.region_path: {limits.region_path!r} is not an absolute path")
    for field, value, allowed in (
        ("core_policy", limits.core_policy, CORE_POLICIES),
        ("priority", limits.priority, PRIORITIES),
        ("oom_policy", limits.oom_policy, OOM_POLICIES),
    ):
        if value not in allowed:
            raise LimitsError(f"limits.{field}: {value!r} is not one of {', '.join(allowed)}")


def limiter_env(limits: ClaimLimits) -> dict[str, str]:
    """The CARVE_* variables for a container of this claim (validated first).

    Per-device variables only (`CARVE_MEMORY_LIMIT_<i>`), so a device without a limit simply has none.
    """
    validate(limits)
    env = {
        names.ENV_REGION: limits.region_path,
        names.ENV_CORE_POLICY: limits.core_policy,
        names.ENV_PRIORITY: limits.priority,
        names.ENV_OOM_POLICY: limits.oom_policy,
    }
    for i, dev in enumerate(limits.devices):
        if dev.memory_bytes:
            env[f"{names.ENV_MEMORY_LIMIT}_{i}"] = str(dev.memory_bytes)
        if dev.cores_percent:
            env[f"{names.ENV_CORES_LIMIT}_{i}"] = str(dev.cores_percent)
    return env


def parse_limiter_env(env: Mapping[str, str], device_count: int) -> ClaimLimits:
    """The inverse of limiter_env, with the limiter's own precedence (per-device beats the global value).

    Used by `carve inspect` and by tests; the C limiter (native/src/config.c) is the authority.
    """
    devices = []
    for i in range(device_count):
        mem = env.get(f"{names.ENV_MEMORY_LIMIT}_{i}", env.get(names.ENV_MEMORY_LIMIT, "0"))
        cores = env.get(f"{names.ENV_CORES_LIMIT}_{i}", env.get(names.ENV_CORES_LIMIT, "0"))
        try:
            devices.append(DeviceLimit(memory_bytes=int(mem), cores_percent=int(cores)))
        except ValueError:
            problem = f"memory {mem!r} or cores {cores!r} is not an integer"
            raise LimitsError(f"env: device {i}: {problem}") from None
    limits = ClaimLimits(
        devices=tuple(devices),
        region_path=env.get(names.ENV_REGION, ""),
        core_policy=env.get(names.ENV_CORE_POLICY, "default"),
        priority=env.get(names.ENV_PRIORITY, "high"),
        oom_policy=env.get(names.ENV_OOM_POLICY, "error"),
    )
    validate(limits)
    return limits
