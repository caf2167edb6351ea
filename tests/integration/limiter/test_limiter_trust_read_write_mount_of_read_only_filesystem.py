"""The plugin's limits directory is trusted only through a mount that is itself read-only (the per-mount
option "ro" in mountinfo, limits.c: read_only), not merely one whose file cannot be written.

A read-write bind mount of a filesystem whose superblock is read-only reads `rw` in mountinfo, while
fstatvfs still reports ST_RDONLY for its files (the kernel ORs the mount's and the superblock's flags): the
limiter's first check, on the file's own filesystem, passes, and only the mount's option tells the two
apart. The plugin always mounts the directory read-only; a read-write mount of it, whatever its superblock
says today, is not the plugin's (the superblock can be remounted read-write under it).

The claims directory is a tmpfs root (test_limiter_trust_claims_at_a_filesystems_root.py), remounted
read-only; the pod's own limits directory names the GPU with 4 MiB, the plugin's file 8 MiB: 6 MiB fit
only where the plugin's mount is trusted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, require_mount_namespace
from test_limiter_trust_claims_at_a_filesystems_root import on_a_filesystem_of_its_own

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.mark.parametrize(
    ("limits_mount", "expected"),
    [
        ("ro", CUDA_SUCCESS),  # as the plugin mounts it: trusted
        ("rw", CUDA_ERROR_OUT_OF_MEMORY),  # the same directory, its mount read-write: the pod's 4 MiB hold
    ],
)
def test_a_read_write_mount_of_the_plugins_limits_on_a_read_only_filesystem_is_not_trusted(
    claim: Callable[..., Claim], tmp_path: Path, limits_mount: str, expected: int
) -> None:
    require_mount_namespace()
    c = claim()
    out = on_a_filesystem_of_its_own(c, tmp_path, 6 * MIB, claims_mount="ro", limits_mount=limits_mount)
    assert out.returncode == 0, out.stderr
    # the case meant: the file's filesystem read-only (ST_RDONLY, 1 == os.ST_RDONLY), the mount as asked
    options = [line.split()[1] for line in out.stderr.splitlines() if line.startswith("options ")]
    assert "st_rdonly 1\n" in out.stderr and options[0][:2] == limits_mount, out.stderr
    assert out.stdout.strip() == str(expected), out.stderr
