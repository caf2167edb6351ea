"""The Python side of a claim's shared accounting region (native/include/carve_region.h).

The plugin creates the region file when it prepares a claim (`create_region`) and reads usage back for
metrics and the NVML cross-check (`Region`). The container can write this file: nothing in it is a limit the
limiter enforces (the plugin-owned limits file is, driver/limits/limitsfile.py), and the plugin opens it as
untrusted (`open_untrusted`). The ctypes structures below mirror the C layout field for
field; tests/unit/limits/test_limits_region_layout.py compares every offset and size with a compiled probe.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from driver.fsutil import PER_BOOT, write_atomic
from driver.limits.env import CORE_POLICIES, MAX_DEVICES, OOM_POLICIES, PRIORITIES, ClaimLimits, validate

MAGIC = int.from_bytes(b"CARVEREG", "little")
VERSION = 2  # 2: the limits moved to the plugin-owned limits file; the copies here are informational
MAX_PROCS = 1024
FROM_PLUGIN = 1
FROM_ENV = 2
REGION_MODE = 0o666  # containers run as any uid; the claim's directory (0700 + mount) is the boundary


class RegionError(Exception):
    """A region file that is missing, foreign or corrupt; the message names the file and the field."""


def open_untrusted(
    path: Path, flags: int, size: int, what: str = "region", cut_oversized: bool = False
) -> int:
    """Open a file a container can write or replace, as untrusted: relative to its directory's descriptor,
    never following a symlink, never blocking on a fifo or device node, regular files only, and never larger
    than `size` (a bigger file is refused, or cut back to `size` with `cut_oversized`: the host space a
    container can fill through it stays bounded). Returns the descriptor; RegionError names the problem."""
    path = Path(path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as e:
        raise RegionError(f"{what} {path}: cannot open its directory: {e.strerror}") from None
    try:
        fd = os.open(path.name, flags | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as e:
        problem = "is a symlink" if e.errno == 40 else f"cannot open: {e.strerror}"  # ELOOP
        raise RegionError(f"{what} {path}: {problem}") from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RegionError(f"{what} {path}: not a regular file (mode {st.st_mode:#o})")
        if st.st_size > size and cut_oversized:
            os.ftruncate(fd, size)
        elif st.st_size != size:
            raise RegionError(f"{what} {path}: size is {st.st_size} bytes, expected {size}")
        if cut_oversized:  # blocks a tenant allocated past the end (FALLOC_FL_KEEP_SIZE); none: a no-op
            punch_past_end(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


_PAGE = os.sysconf("SC_PAGE_SIZE")
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


def punch_past_end(fd: int, size: int) -> None:
    """Free the blocks a container allocated past the end of file (fallocate with FALLOC_FL_KEEP_SIZE leaves
    st_size as it was, so only st_blocks shows them): a truncate to the same size, else hole punching past
    the end. Best effort (the region's own tmpfs caps them anyway, driver/plugin/container/regionfs.py)."""
    # A truncate to the same size drops what lies past the end on ext4 (whose hole punching stops at the
    # end of file); the contents up to `size`, and every mapping of them, stay as they are.
    os.ftruncate(fd, size)
    if os.fstat(fd).st_blocks * 512 <= _PAGE * -(-size // _PAGE):
        return
    start = _PAGE * -(-size // _PAGE)
    # To the filesystem's largest file size, which the kernel does not say: the first length it accepts
    # (EFBIG past it: ext4 stops at 16 TiB, xfs and tmpfs go further).
    for bits in (62, 52, 46, 44, 42, 40):
        if _libc.fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, (1 << bits) - start) == 0:
            return


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
    write_atomic(Path(path), region_bytes(limits), mode=REGION_MODE, durable=PER_BOOT)


@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    host_pid: int
    used: tuple[int, ...]  # bytes per device
    pid_ns: int = 0  # inode of the process's pid namespace (0 when the limiter could not tell)


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
    """A mapped region file: usage, process slots and measured utilization. Its limit fields are the copy
    written at create (informational): the limits the limiter enforces are in the limits file."""

    def __init__(self, path: Path, mapping: mmap.mmap, struct: RegionStruct):
        self.path = Path(path)
        self._map = mapping
        self._struct = struct

    @classmethod
    def open(cls, path: Path, cut_oversized: bool = False) -> Region:
        """Map a region file, opened as untrusted (open_untrusted); `cut_oversized`: a file a container grew
        is cut back to the layout's size instead of refused."""
        path = Path(path)
        fd = open_untrusted(path, os.O_RDWR, REGION_SIZE, "region", cut_oversized)
        try:
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

    def target(self, device: int) -> int:
        """The share (percent) the limiter held the claim to at its last tick: 100 while not throttled."""
        return self._device(device).target

    def processes(self) -> list[ProcessUsage]:
        """Processes currently holding a slot (possibly dead ones not reclaimed yet)."""
        n = self._struct.device_count
        return [
            ProcessUsage(p.pid, p.host_pid, tuple(p.used[:n]), p.pid_ns)
            for p in self._struct.procs
            if p.pid > 0
        ]

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
