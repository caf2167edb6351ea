"""The Python side of a claim's shared accounting region (native/include/carve_region.h).

The plugin creates the region file when it prepares a claim (`create_region`), reads usage back for metrics
and writes live compute shares into it (`Region`). The ctypes structures below mirror the C layout field for
field; tests/unit/limits/test_limits_region_layout.py compares every offset and size with a compiled probe.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from driver.fsutil import write_atomic
from driver.limits.env import CORE_POLICIES, MAX_DEVICES, OOM_POLICIES, PRIORITIES, ClaimLimits, validate

MAGIC = int.from_bytes(b"CARVEREG", "little")
VERSION = 1
MAX_PROCS = 1024
FROM_PLUGIN = 1
FROM_ENV = 2
REGION_MODE = 0o666  # containers run as any uid; the claim's directory (0700 + mount) is the boundary


class RegionError(Exception):
    """A region file that is missing, foreign or corrupt; the message names the file and the field."""


class DeviceStruct(ctypes.Structure):
    _fields_ = [
        ("memory_limit", ctypes.c_uint64),
        ("memory_used", ctypes.c_uint64),
        ("memory_peak", ctypes.c_uint64),
        ("oom_refusals", ctypes.c_uint64),
        ("cores_limit", ctypes.c_uint32),
        ("high_neighbours", ctypes.c_uint32),
        ("utilization", ctypes.c_uint32),
        ("target", ctypes.c_uint32),
        ("uuid", ctypes.c_char * 48),
        ("reserved", ctypes.c_uint64 * 4),
    ]


class ProcStruct(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int32),
        ("host_pid", ctypes.c_int32),
        ("start_time", ctypes.c_uint64),
        ("pid_ns", ctypes.c_uint64),
        ("used", ctypes.c_uint64 * MAX_DEVICES),
        ("reserved", ctypes.c_uint64),
    ]


class RegionStruct(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_uint64),
        ("version", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("size", ctypes.c_uint64),
        ("device_count", ctypes.c_uint32),
        ("max_procs", ctypes.c_uint32),
        ("core_policy", ctypes.c_uint32),
        ("priority", ctypes.c_uint32),
        ("oom_policy", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("generation", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 8),
        ("devices", DeviceStruct * MAX_DEVICES),
        ("procs", ProcStruct * MAX_PROCS),
    ]


REGION_SIZE = ctypes.sizeof(RegionStruct)


def region_bytes(limits: ClaimLimits, flags: int = FROM_PLUGIN) -> bytes:
    """The initial content of a region file for `limits` (validated)."""
    validate(limits)
    region = RegionStruct()
    region.magic = MAGIC
    region.version = VERSION
    region.flags = flags
    region.size = REGION_SIZE
    region.device_count = len(limits.devices)
    region.max_procs = MAX_PROCS
    region.core_policy = CORE_POLICIES.index(limits.core_policy)
    region.priority = PRIORITIES.index(limits.priority)
    region.oom_policy = OOM_POLICIES.index(limits.oom_policy)
    region.generation = 1
    for i, dev in enumerate(limits.devices):
        region.devices[i].memory_limit = dev.memory_bytes
        region.devices[i].cores_limit = dev.cores_percent
        region.devices[i].uuid = dev.uuid.encode()
    return bytes(region)


def create_region(path: Path, limits: ClaimLimits) -> None:
    """Create (or replace) the region file atomically: temp file, fsync, rename, fsync the directory.

    The caller owns the directory and its mode. Replacing a region that live processes map detaches them
    from the new file, so the plugin calls this once per claim, at prepare.
    """
    write_atomic(Path(path), region_bytes(limits), mode=REGION_MODE)


@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    host_pid: int
    used: tuple[int, ...]  # bytes per device


HostPids = dict[tuple[int, int], int]  # (pid namespace inode, pid inside it) -> host pid


def scan_host_pids(proc: Path = Path("/proc")) -> HostPids:
    """Every process this node can see, by its innermost pid namespace and its pid there.

    Seeing the host's pids needs the host's pid namespace (the plugin's DaemonSet runs with hostPID: true).
    """
    found: HostPids = {}
    for entry in Path(proc).iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(entry / "ns" / "pid").st_ino
            status = (entry / "status").read_text()
        except OSError:
            continue  # exited, or not ours to read
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if nspid:
            found[(ns, int(nspid[-1]))] = int(entry.name)
    return found


class Region:
    """A mapped region file: read usage, change limits live. Writes are single aligned stores."""

    def __init__(self, path: Path, mapping: mmap.mmap, struct: RegionStruct):
        self.path = Path(path)
        self._map = mapping
        self._struct = struct

    @classmethod
    def open(cls, path: Path) -> Region:
        path = Path(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise RegionError(f"region {path}: cannot open: {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size != REGION_SIZE:
                raise RegionError(f"region {path}: size is {size} bytes, expected {REGION_SIZE}")
            mapping = mmap.mmap(fd, REGION_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        struct = RegionStruct.from_buffer(mapping)
        problem = None
        if struct.magic != MAGIC:
            problem = f"magic is {struct.magic:#x}, expected {MAGIC:#x}"
        elif struct.version != VERSION:
            problem = f"version is {struct.version}, expected {VERSION}"
        elif struct.size != REGION_SIZE:
            problem = f"size field is {struct.size}, expected {REGION_SIZE}"
        elif not 0 < struct.device_count <= MAX_DEVICES:
            problem = f"device_count is {struct.device_count}"
        if problem:
            del struct
            mapping.close()
            raise RegionError(f"region {path}: {problem}")
        return cls(path, mapping, struct)

    @property
    def device_count(self) -> int:
        return self._struct.device_count

    @property
    def priority(self) -> str:
        """The claim's priority, `high` or `low` (PRIORITIES)."""
        value = self._struct.priority
        return PRIORITIES[value] if value < len(PRIORITIES) else f"unknown({value})"

    @property
    def core_policy(self) -> str:
        value = self._struct.core_policy
        return CORE_POLICIES[value] if value < len(CORE_POLICIES) else f"unknown({value})"

    def uuid(self, device: int) -> str:
        """The GPU UUID written for this device ("" when unknown: the limiter maps it by position)."""
        return self._device(device).uuid.decode(errors="replace")

    def high_neighbours(self, device: int) -> int:
        return self._device(device).high_neighbours

    def _device(self, device: int) -> DeviceStruct:
        if not 0 <= device < self._struct.device_count:
            raise RegionError(f"region {self.path}: device {device} out of range 0..{self.device_count - 1}")
        return self._struct.devices[device]

    def used_bytes(self, device: int) -> int:
        return self._device(device).memory_used

    def peak_bytes(self, device: int) -> int:
        return self._device(device).memory_peak

    def memory_limit(self, device: int) -> int:
        return self._device(device).memory_limit

    def oom_refusals(self, device: int) -> int:
        return self._device(device).oom_refusals

    def cores_limit(self, device: int) -> int:
        return self._device(device).cores_limit

    def utilization(self, device: int) -> int:
        """The claim's SM utilization (percent) the limiter measured at its last tick."""
        return self._device(device).utilization

    def set_cores_limit(self, device: int, percent: int) -> None:
        """Change a running claim's compute share; limiters pick it up at their next tick."""
        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            raise RegionError(f"region {self.path}: devices[{device}].cores_limit: {percent!r} not in 0..100")
        self._device(device).cores_limit = percent
        self._struct.generation += 1

    def set_high_neighbours(self, device: int, count: int) -> None:
        """How many high-priority claims share this GPU; a low-priority claim yields while they are busy."""
        if count < 0:
            raise RegionError(f"region {self.path}: devices[{device}].high_neighbours: {count} is negative")
        self._device(device).high_neighbours = count
        self._struct.generation += 1

    def processes(self) -> list[ProcessUsage]:
        """Processes currently holding a slot (possibly dead ones not reclaimed yet)."""
        n = self._struct.device_count
        return [ProcessUsage(p.pid, p.host_pid, tuple(p.used[:n])) for p in self._struct.procs if p.pid > 0]

    def needs_host_pids(self) -> bool:
        """Whether a process of the claim waits for the node to tell its host pid."""
        return any(p.pid > 0 and p.host_pid == 0 and p.pid_ns for p in self._struct.procs)

    def resolve_host_pids(self, proc: Path = Path("/proc"), known: HostPids | None = None) -> int:
        """Fill in the host pid of processes that run in their own pid namespace; returns how many.

        NVML reports host pids; a containerised process cannot see its own, the node can. A slot is matched by
        its pid namespace inode and its pid inside that namespace (the last field of NSpid). `known`: a
        scan_host_pids() result to share between regions (one walk of /proc for all claims).
        """
        pending = [p for p in self._struct.procs if p.pid > 0 and p.host_pid == 0 and p.pid_ns]
        if not pending:
            return 0
        if known is None:
            known = scan_host_pids(proc)
        filled = 0
        for slot in pending:
            host = known.get((slot.pid_ns, slot.pid))
            if host:
                slot.host_pid = host
                filled += 1
        return filled

    def close(self) -> None:
        if self._map.closed:
            return
        del self._struct
        # a caller may still hold a view of a field: the mapping then goes when that view does
        with contextlib.suppress(BufferError):
            self._map.close()

    def __enter__(self) -> Region:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
