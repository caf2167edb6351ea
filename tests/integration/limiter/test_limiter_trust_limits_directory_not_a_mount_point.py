"""A limits directory that is not itself a mount point is not trusted, however read-only the mount it sits
in (limits.c, mount_is_plugins: trust is decided by the entry whose mount point is <dir>/<uid>/limits, and
with none there is none).

A pod's image can carry /var/run/carve/<name>/limits/limits on a read-only root filesystem, or a
readOnly volume can hold a whole claim directory: the file is then read-only, mode 0444, on the plugin's
device even, but no mount sits at its limits directory. Here the pod mounts a claim directory of its own
read-only at /run/carve/000-x (its limits file naming the GPU without a limit, its region given a writable
mount of its own, as a region must be), named before the plugin's claim. Untrusted, the plugin's trusted
8 MiB hold and 9 MiB do not fit; trusted, the pod's file would come first and lift the limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from limiter_harness import Claim
from test_limiter_escape import MIB, contained, contained_claim, forged_limits

CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_limits_directory_inside_a_read_only_mount_is_not_trusted(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 0)  # <tmp>/forged/{limits/limits,region}: no memory limit
    writable_region = tmp_path / "writable-region"
    mounts = (
        f"cp {forged}/../region {writable_region} && mkdir -p /run/carve/000-x"
        f" && mount --bind {forged}/.. /run/carve/000-x && mount -o remount,bind,ro /run/carve/000-x"
        f" && mount --bind {writable_region} /run/carve/000-x/region"
        # the case meant: a mount at the claim directory and at its region, none at its limits directory
        " && grep -c ' /run/carve/000-x/limits ' /proc/self/mountinfo | sed 's/^/limits mounts /' >&2"
    )
    out = contained(c, tmp_path, "pass", 9 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert "limits mounts 0\n" in out.stderr, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the plugin's 8 MiB hold
