"""A CARVE_LIMITS_SOURCE whose root does not fit the limiter's PATH_MAX buffer trusts no file: it is refused
whole (limits.c, limits_source: `strlen(v + used) >= len`), never cut to its first 4095 characters, which
name another directory.

The root is written escaped (a space is \\040, four characters), so a claims directory of about 1,100
characters has an escaped root of exactly 4,096, one more than the buffer holds with its NUL (or 4,097,
two more). Cut there, the root ends in "\\04" (or "\\0"), which unescapes to itself: a literal backslash
and digits, the name of a sibling directory. Here that sibling's claim directory is what the pod mounted
at the claim's mount point (a readOnly volume from the node's disk over the plugin's mount, the last
entry there), with a limits file naming the GPU without a limit; the pod's writable directory names it
with 4 MiB. Refused, the anchor trusts nothing and the tightest file holds: 6 MiB do not fit. Cut, it
would name the sibling and trust the pod's file: no limit."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits

from driver.limits import ClaimLimits, DeviceLimit, write_limits
from driver.limits.mounts import limits_source

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
BUFFER = 4096  # PATH_MAX, the limiter's buffer for the root, NUL included


def claims_with_root_of(tmp_path: Path, escaped_length: int) -> tuple[str, str]:
    """A claims directory under `tmp_path` (relative to it) whose root, escaped, is `escaped_length`
    characters and ends in a space ("\\040"), and the directory (relative too) that root names when cut to
    the buffer's 4095 characters (for up to 4098): the same path with its last space replaced by what the
    cut leaves of "\\040", a literal backslash and digits."""
    length = len(limits_source(tmp_path).split(":", 2)[2])
    parts = []
    while escaped_length - length > 900:
        parts.append(" " * 200)  # "/" and 200 escapes: 801 characters, 201 on the disk
        length += 801
    remaining = escaped_length - length  # "/", k letters and m escaped spaces
    m = (remaining - 2) // 4
    k = remaining - 1 - 4 * m
    claims = "/".join([*parts, "a" * k + " " * m])
    kept = "\\040"[: 4 - (escaped_length - (BUFFER - 1))]  # what the cut leaves of the last escape
    cut = "/".join([*parts, "a" * k + " " * (m - 1) + kept])
    return claims, cut


@pytest.mark.parametrize("length", [BUFFER, BUFFER + 1], ids=["one-over", "two-over"])
def test_an_anchor_too_long_for_the_limiter_trusts_no_file(
    claim: Callable[..., Claim], tmp_path: Path, length: int
) -> None:
    c, uuid = contained_claim(claim)
    claims, cut = claims_with_root_of(tmp_path, length)
    source = limits_source(tmp_path / claims)
    assert len(source.split(":", 2)[2]) == length and source.endswith("\\040")  # the case meant
    # the sibling's claim directory, with the pod's limits file: the GPU without a limit, mode 0444
    sibling = tmp_path / cut / UID / "limits"
    write_limits(sibling / "limits", ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x"))
    assert len(str(sibling)) < BUFFER  # on the disk the paths are short enough to mount
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mount_point = f"/run/carve/{UID}/limits"
    mounts = (
        f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
        f" && mount --bind {shlex.quote(str(sibling))} {mount_point}"
        f" && mount -o remount,bind,ro {mount_point}"
    )
    out = contained(
        c,
        tmp_path,
        "pass",
        6 * MIB,
        pod_mounts=mounts.replace("{", "{{").replace("}", "}}"),
        claims_dir=claims,
        CARVE_REGION="",
        CARVE_LIMITS_SOURCE=source,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the pod's 4 MiB hold


def test_an_anchor_as_long_as_the_limiter_holds_is_trusted(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    # the other side of the bound: an escaped root of 4,095 characters fits with its NUL and is the
    # plugin's anchor like any other; the plugin's 8 MiB win over the pod's own 4 MiB and 6 MiB fit
    c, uuid = contained_claim(claim)
    claims, _ = claims_with_root_of(tmp_path, BUFFER - 1)
    source = limits_source(tmp_path / claims)
    assert len(source.split(":", 2)[2]) == BUFFER - 1  # the case meant
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mounts = f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
    out = contained(
        c,
        tmp_path,
        "pass",
        6 * MIB,
        pod_mounts=mounts,
        claims_dir=claims,
        CARVE_REGION="",
        CARVE_LIMITS_SOURCE=source,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_SUCCESS), out.stderr
