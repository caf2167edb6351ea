"""The plugin-owned limits file of a claim (carve_limits_t in native/include/carve_region.h).

The limiter enforces only what this file says (and, without one, its environment); the container mounts
its directory read-only and cannot change it. The plugin writes it whole and atomically at prepare and
whenever a claim's effective compute share or high-priority neighbours change
(driver/plugin/enforcement/regions.py).
The ctypes structures mirror the C layout; tests/unit/limits/test_limits_region_layout.py compares them
with a compiled probe.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path

from driver.fsutil import PER_BOOT, write_atomic
from driver.limits.env import CORE_POLICIES, MAX_DEVICES, OOM_POLICIES, PRIORITIES, ClaimLimits, validate
from driver.limits.region import RegionError, open_untrusted

LIMITS_MAGIC = int.from_bytes(b"CARVELIM", "little")
LIMITS_VERSION = 1
LIMITS_MODE = 0o444  # read by every uid of the container, written by no one (the plugin replaces it whole)
LIMITS_DIR_MODE = 0o755


def limits_path_for(region_path: str | Path) -> Path:
    """Where the limiter looks for a claim's limits file: <directory of the region>/limits/limits (in a
    container /var/run/carve/<claim-uid>/limits/limits, a read-only mount of the plugin's limits dir)."""
    return Path(region_path).parent / "limits" / "limits"


class LimitsDeviceStruct(ctypes.Structure):
    _fields_ = [
        ("memory_limit", ctypes.c_uint64),
        ("cores_limit", ctypes.c_uint32),
        ("cores_reserved", ctypes.c_uint32),
        ("high_neighbours", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("uuid", ctypes.c_char * 48),
        ("reserved", ctypes.c_uint64 * 4),
    ]


class LimitsStruct(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_uint64),
        ("version", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("size", ctypes.c_uint64),
        ("device_count", ctypes.c_uint32),
        ("core_policy", ctypes.c_uint32),
        ("priority", ctypes.c_uint32),
        ("oom_policy", ctypes.c_uint32),
        ("generation", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 4),
        ("devices", LimitsDeviceStruct * MAX_DEVICES),
    ]


LIMITS_SIZE = ctypes.sizeof(LimitsStruct)


@dataclass(frozen=True)
class ClaimRuntime:
    """What the plugin decides per device beyond the claim's own limits: the effective compute share (a
    best-effort claim gets what the GPU's reservations leave) and the busy high-priority neighbours."""

    shares: tuple[int, ...] = ()  # effective cores percent per device; () = the claim's own cores_percent
    high_neighbours: tuple[int, ...] = field(default=())  # per device; () = none


def limits_bytes(limits: ClaimLimits, runtime: ClaimRuntime, generation: int) -> bytes:
    """The content of a limits file (validated); write_limits gives the generation (its only caller)."""
    validate(limits)
    s = LimitsStruct()
    s.magic = LIMITS_MAGIC
    s.version = LIMITS_VERSION
    s.size = LIMITS_SIZE
    s.device_count = len(limits.devices)
    s.core_policy = CORE_POLICIES.index(limits.core_policy)
    s.priority = PRIORITIES.index(limits.priority)
    s.oom_policy = OOM_POLICIES.index(limits.oom_policy)
    s.generation = generation
    for i, dev in enumerate(limits.devices):
        share = runtime.shares[i] if i < len(runtime.shares) else dev.cores_percent
        if not 0 <= share <= 100:
            raise RegionError(f"limits: devices[{i}] effective share {share} is not in 0..100")
        s.devices[i].memory_limit = dev.memory_bytes
        s.devices[i].cores_limit = share
        s.devices[i].cores_reserved = dev.cores_percent
        s.devices[i].high_neighbours = runtime.high_neighbours[i] if i < len(runtime.high_neighbours) else 0
        s.devices[i].uuid = dev.uuid.encode()
    return bytes(s)


def write_limits(path: Path, limits: ClaimLimits, runtime: ClaimRuntime = ClaimRuntime()) -> None:
    """Write (or replace) the limits file atomically; its generation is one more than the file it replaces."""
    path = Path(path)
    path.parent.mkdir(mode=LIMITS_DIR_MODE, parents=True, exist_ok=True)
    try:
        generation = read_limits(path).generation + 1
    except RegionError:
        generation = 1
    write_atomic(path, limits_bytes(limits, runtime, generation), mode=LIMITS_MODE, durable=PER_BOOT)


@dataclass(frozen=True)
class LimitsView:
    """A limits file as read back: what the limiter enforces for the claim."""

    generation: int
    core_policy: str
    priority: str
    oom_policy: str
    memory_limits: tuple[int, ...]
    cores_limits: tuple[int, ...]  # effective shares
    cores_reserved: tuple[int, ...]
    high_neighbours: tuple[int, ...]
    uuids: tuple[str, ...]


def read_limits(path: Path) -> LimitsView:
    """Read a limits file; RegionError names the file and the problem."""
    fd = open_untrusted(Path(path), os.O_RDONLY, LIMITS_SIZE, "limits")
    try:
        data = os.pread(fd, LIMITS_SIZE, 0)
    finally:
        os.close(fd)
    if len(data) != LIMITS_SIZE:
        raise RegionError(f"limits {path}: short read ({len(data)} of {LIMITS_SIZE} bytes)")
    s = LimitsStruct.from_buffer_copy(data)
    problem = None
    if s.magic != LIMITS_MAGIC:
        problem = f"magic is {s.magic:#x}, expected {LIMITS_MAGIC:#x}"
    elif s.version != LIMITS_VERSION:
        problem = f"version is {s.version}, expected {LIMITS_VERSION}"
    elif not 0 < s.device_count <= MAX_DEVICES:
        problem = f"device_count is {s.device_count}"
    elif (
        s.core_policy >= len(CORE_POLICIES)
        or s.priority >= len(PRIORITIES)
        or s.oom_policy >= len(OOM_POLICIES)
    ):
        problem = "a policy is out of range"
    if problem:
        raise RegionError(f"limits {path}: {problem}")
    devs = s.devices[: s.device_count]
    return LimitsView(
        generation=s.generation,
        core_policy=CORE_POLICIES[s.core_policy],
        priority=PRIORITIES[s.priority],
        oom_policy=OOM_POLICIES[s.oom_policy],
        memory_limits=tuple(d.memory_limit for d in devs),
        cores_limits=tuple(d.cores_limit for d in devs),
        cores_reserved=tuple(d.cores_reserved for d in devs),
        high_neighbours=tuple(d.high_neighbours for d in devs),
        uuids=tuple(d.uuid.decode(errors="replace") for d in devs),
    )
