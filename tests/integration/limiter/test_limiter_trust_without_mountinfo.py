"""Where /proc/self/mountinfo cannot be opened, no limits file is trusted (limits.c, mount_is_plugins): the
limiter cannot tell the plugin's mount from a pod's, so it treats every file as a pod's and the tightest
holds, as without CARVE_LIMITS_SOURCE.

A container whose /proc is hidden (a tmpfs mounted over it here) keeps its read-only mounts: the pod's own
readOnly volume of a limits directory (naming the GPU without a limit, at /run/carve/000-forged, named
before the plugin's claim) and the plugin's (8 MiB). Neither trusted, the tighter 8 MiB hold and 9 MiB do
not fit; were the files trusted without the check, the pod's would come first and lift the limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from limiter_harness import Claim
from test_limiter_escape import MIB, POD_MOUNTS, contained, contained_claim, forged_limits

CUDA_ERROR_OUT_OF_MEMORY = 2


def test_without_mountinfo_no_limits_file_is_trusted(claim: Callable[..., Claim], tmp_path: Path) -> None:
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 0)  # no memory limit
    mounts = (
        POD_MOUNTS["read-only-volume"].format(forged=forged)
        + " && mount -t tmpfs tmpfs /proc"
        + " && { test -e /proc/self/mountinfo && echo mountinfo present >&2 || echo no mountinfo >&2; }"
    )
    out = contained(
        c, tmp_path, "pass", 9 * MIB, pod_mounts=mounts.replace("{", "{{").replace("}", "}}"), CARVE_REGION=""
    )
    assert out.returncode == 0, out.stderr
    assert "no mountinfo" in out.stderr, out.stderr  # the case meant
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the tighter 8 MiB hold
