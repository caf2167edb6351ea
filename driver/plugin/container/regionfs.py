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


def cap(directory: Path) -> bool:
    """Mount a size-capped tmpfs at `directory` (an empty directory of the plugin's, mode 0755) unless one
    is there already. True when the directory is capped."""
    directory = Path(directory)
    if os.path.ismount(directory):
        return True
    options = f"size={FS_BYTES},nr_inodes=8,mode=0755".encode()
    if _libc.mount(b"tmpfs", bytes(directory), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) == 0:
        return True
    err = ctypes.get_errno()
    if not _warned:
        _warned.append(True)
        event(
            log,
            logging.WARNING,
            "regions.uncapped",
            dir=str(directory),
            error=os.strerror(err),
            detail="regions stay on the plugin's filesystem; blocks past their end are punched every pass",
        )
    return False


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
