"""A claim's region directory as a tmpfs of its own, so a tenant fills at most its own share of the host.

The region is the one host file a container writes (docs/security.md, "Region files"). Its size is fixed,
but fallocate(FALLOC_FL_KEEP_SIZE) allocates blocks past its end without changing st_size: on the plugin's
state filesystem that lets one tenant fill it for everyone (checkpoint, CDI specs, the other claims'
files). So the region's directory is a tmpfs mounted at prepare, sized for two region files (the file and
the atomic rewrite's temporary copy) with a handful of inodes: an allocation through the region stops at
its own claim's pages with ENOSPC. Unprepare unmounts it lazily (a container that still runs keeps its own
bind mount of the file). A plugin that may not mount (no CAP_SYS_ADMIN) keeps the plain directory and says
so once (`regions.uncapped`); the region watcher still punches blocks past the end every pass.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
from pathlib import Path

from driver.limits.region import REGION_SIZE
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
PAGE = os.sysconf("SC_PAGE_SIZE")
FS_BYTES = 2 * -(-REGION_SIZE // PAGE) * PAGE  # the file and the temporary copy of an atomic rewrite
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)
_warned: list[bool] = []


def _mount_of(directory: Path) -> list[str] | None:
    """The /proc/self/mountinfo fields of the mount holding `directory` (the longest mount point above it)."""
    best: list[str] | None = None
    target = str(directory.resolve())
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[4])):
            best = fields
    return best


def host_sees_mounts(directory: Path, proc: Path = Path("/proc")) -> bool:
    """Would a mount made here at `directory` reach the container runtime? Yes when the plugin shares the
    mount namespace of the node's init (a plugin run on the host; the chart runs it with hostPID), or when
    the mount holding `directory` propagates (shared: the chart's Bidirectional mount of the plugin dir).
    A mount the runtime does not see would hide the region from it: then the directory stays plain."""
    try:
        if os.stat(proc / "self/ns/mnt").st_ino == os.stat(proc / "1/ns/mnt").st_ino:
            return True
    except OSError:
        pass
    fields = _mount_of(directory)
    if fields is None:
        return False
    optional = fields[6 : fields.index("-")]
    return any(f.startswith("shared:") for f in optional)


_SEES: dict[tuple[int, int], bool] = {}


def _host_sees_mounts_cached(directory: Path) -> bool:
    """host_sees_mounts, remembered per filesystem of the directory's parent and mount namespace: every
    region directory of a node sits under the one claims directory, and mountinfo (read by
    host_sees_mounts) grows a line per region tmpfs, so asking at every prepare costs O(claims) under the
    node lock (docs/performance.md)."""
    try:
        key = (os.stat(directory.parent).st_dev, os.stat("/proc/self/ns/mnt").st_ino)
    except OSError:
        return host_sees_mounts(directory)
    seen = _SEES.get(key)
    if seen is None:
        seen = _SEES[key] = host_sees_mounts(directory)
    return seen


def _is_mount(directory: Path) -> bool:
    """os.path.ismount without its realpath(): that walks every component of the path in Python (an lstat
    each), the largest part of cap()'s cost at a prepare. A symlink is no mount point, as for ismount; for
    anything else the kernel resolves `..` from the directory itself, so lstat of `<dir>/..` is the parent
    ismount's realpath finds."""
    try:
        st = os.lstat(directory)
        if stat.S_ISLNK(st.st_mode):
            return False
        parent = os.lstat(os.path.join(directory, ".."))
    except (OSError, ValueError):
        return False
    return st.st_dev != parent.st_dev or st.st_ino == parent.st_ino


def cap(directory: Path, force: bool) -> bool:
    """Mount a size-capped tmpfs at `directory` (an empty directory of the plugin's, mode 0755) unless one
    is there already, where the container runtime will see it (`force`: --region-fs on, the operator says
    it does; no default: its one caller always says). True when the directory is capped."""
    directory = Path(directory)
    if _is_mount(directory):
        return True
    if not force and not _host_sees_mounts_cached(directory):
        _warn(directory, "the plugin directory's mount does not propagate to the host (mountPropagation)")
        return False
    options = f"size={FS_BYTES},nr_inodes=8,mode=0755".encode()
    if _libc.mount(b"tmpfs", bytes(directory), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) == 0:
        return True
    _warn(directory, os.strerror(ctypes.get_errno()))
    return False


def _warn(directory: Path, error: str) -> None:
    if not _warned:
        _warned.append(True)
        event(
            log,
            logging.WARNING,
            "regions.uncapped",
            dir=str(directory),
            error=error,
            detail="regions stay on the plugin's filesystem; blocks past their end are punched every pass",
        )


def release(directory: Path) -> None:
    """Unmount a region directory's tmpfs (lazily), if it has one."""
    directory = Path(directory)
    mounted = directory.is_dir() and not directory.is_symlink() and os.path.ismount(directory)
    if mounted and _libc.umount2(bytes(directory), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        event(log, logging.WARNING, "regions.umount-failed", dir=str(directory), error=os.strerror(err))


def release_under(claim_root: Path) -> None:
    """Before a claim directory is removed: unmount its region tmpfs (rmtree cannot remove a mount point)."""
    release(Path(claim_root) / "region")
