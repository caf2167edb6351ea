"""Writing a claim's directory on the host: the one rule both the DRA preparer and the legacy device plugin
follow before a CDI spec may name the directory.

The limiter and its ld.so.preload hook must exist (a spec that mounts a missing library would start the
container without limits), then the claim directory (0700, under a 0700 parent), the shared region in it
(usage accounting; its directory 0755: the claim's containers may run as any uid; a tmpfs of its own,
regionfs.py) and the plugin-owned
limits file (what the limiter enforces; its directory is mounted read-only).
"""

from __future__ import annotations

import os
from pathlib import Path

from driver import names
from driver.fsutil import ensure_private_dir
from driver.limits import ClaimLimits, ClaimRuntime, create_region, write_limits
from driver.plugin.container import regionfs
from driver.plugin.container.edits import ClaimFiles

ALONE = ClaimRuntime()  # the runtime of a claim alone on its GPUs


class LimiterMissing(FileNotFoundError):
    """The limiter library or its preload hook is not installed in the limiter directory."""


def check_limiter(limiter_dir: Path) -> None:
    limiter = Path(limiter_dir) / names.LIMITER_LIBRARY
    if not limiter.is_file():
        raise LimiterMissing(f"limiter: {limiter} does not exist (set --limiter-dir)")
    hook = Path(limiter_dir) / names.HOOK_BINARY
    if not hook.is_file():
        raise LimiterMissing(f"limiter: {hook} (the ld.so.preload hook) does not exist")


def _claim_dir(root: Path) -> None:
    """The claim's directory, 0700 under a 0700 parent. The parent exists after the first claim: one
    mkdir for a new claim (a prepare's hot path, docs/performance.md), the parent made only when missing."""
    try:
        os.mkdir(root, 0o700)
    except FileNotFoundError:
        ensure_private_dir(root.parent)
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass  # a retry: the mode is set below as for a new one
    os.chmod(root, 0o700)  # whatever the umask took


def write_claim_files(
    files: ClaimFiles,
    limiter_dir: Path,
    limits: ClaimLimits,
    runtime: ClaimRuntime = ALONE,
    region_fs: str = "off",
) -> None:
    """Check the limiter, create the claim directory, (re)create its region and write its limits file
    (`runtime`: the shares among the node's claims, as the DRA preparer computes them; the default is a
    claim alone on its GPUs). `region_fs` (auto, on, off): whether the region's directory is a tmpfs of its
    own (regionfs.py; the DRA plugin's --region-fs)."""
    check_limiter(limiter_dir)
    _claim_dir(files.root)
    files.region_dir.mkdir(mode=0o755, exist_ok=True)
    if region_fs != "off":  # what a tenant allocates through its region stays in its own share
        regionfs.cap(files.region_dir, force=region_fs == "on")
    files.region_dir.chmod(0o755)
    create_region(files.region, limits)
    write_limits(files.limits, limits, runtime)


__all__ = ["ALONE", "LimiterMissing", "check_limiter", "write_claim_files"]
