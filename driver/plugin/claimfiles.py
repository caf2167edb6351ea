"""Writing a claim's directory on the host: the one rule both the DRA preparer and the legacy device plugin
follow before a CDI spec may name the directory.

The limiter and its ld.so.preload hook must exist (a spec that mounts a missing library would start the
container without limits), then the claim directory (0700, under a 0700 parent) and the shared region in it.
The region directory is 0755: it is mounted into the claim's containers, which may run as any uid.
"""

from __future__ import annotations

from pathlib import Path

from driver import names
from driver.fsutil import ensure_private_dir
from driver.limits import ClaimLimits, create_region
from driver.plugin.edits import ClaimFiles


class LimiterMissing(FileNotFoundError):
    """The limiter library or its preload hook is not installed in the limiter directory."""


def check_limiter(limiter_dir: Path) -> None:
    limiter = Path(limiter_dir) / names.LIMITER_LIBRARY
    if not limiter.is_file():
        raise LimiterMissing(f"limiter: {limiter} does not exist (set --limiter-dir)")
    hook = Path(limiter_dir) / names.HOOK_BINARY
    if not hook.is_file():
        raise LimiterMissing(f"limiter: {hook} (the ld.so.preload hook) does not exist")


def write_claim_files(files: ClaimFiles, limiter_dir: Path, limits: ClaimLimits) -> None:
    """Check the limiter, create the claim directory and (re)create its region from `limits`."""
    check_limiter(limiter_dir)
    ensure_private_dir(files.root.parent)
    ensure_private_dir(files.root)
    files.region_dir.mkdir(mode=0o755, exist_ok=True)
    files.region_dir.chmod(0o755)
    create_region(files.region, limits)


__all__ = ["LimiterMissing", "check_limiter", "write_claim_files"]
