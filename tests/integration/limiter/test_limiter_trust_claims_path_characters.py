"""The plugin's mount is recognised whatever characters its claims directory's path and the claim's uid
hold: those mountinfo escapes (tab, newline, space and backslash, each written as \\ooo by the kernel's
mangle in fs/proc_namespace.c), a literal backslash followed by digits (written \\134 then the digits), a
percent sign (which the limiter must copy, never read as a format), a name that ends in a character
sorting before "/" (only trailing slashes are dropped from the root, limits.c: limits_source), and octal
digits after another character than a backslash (no escape: limits.c, unescape).

CARVE_LIMITS_SOURCE is what the plugin computes (driver.limits.mounts.limits_source), its root escaped as
mountinfo escapes it; the limiter unescapes it and the mountinfo entry of the claim's mount, and compares
them with the real paths. The pod's own writable limits directory names the GPU with 4 MiB, the plugin's
file 8 MiB: 6 MiB fit only where the plugin's mount is recognised and trusted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits

from driver.limits.mounts import limits_source

CUDA_SUCCESS = 0

# (claims directory under the test's tmp dir, claim uid)
PATHS = {
    "tab": ("plugin\tdir/claims", UID),  # \011
    "newline": ("plugin\ndir/claims", "0f0e0d0c\nclaim"),  # \012, in the root and in the mount point
    "backslash-then-digits": ("plugin\\040dir/claims", "0f0e0d0c\\134claim"),  # \134 then "040"
    "percent": ("plugin%d%s%%dir/claims", UID),  # printf's directives, copied as they are
    "ends-before-slash": ("plugin dir/claims-. ", UID),  # "-", "." and " " sort before "/"
    # in the uid, which the mount point holds and the limiter compares with the real path (a root is
    # unescaped on both sides, the anchor's and mountinfo's): an escape right after a character below "0",
    # whatever comes before the backslash
    "escape-after-a-low-character": ("claims", "0f0e0d0c- claim"),
    # three octal digits after a character that is not a backslash, below it ("-") and above it ("a"):
    # no escape, copied as they are
    "digits-not-escaped": ("claims", "0f0e0d0c-123a123"),
    # an escape the last character of the uid, followed in the mount point by "/" (below "0")
    "escape-last-in-uid": ("claims", "0f0e0d0c-claim "),
}


@pytest.mark.parametrize("case", sorted(PATHS))
def test_the_plugins_mount_is_recognised_whatever_its_paths_characters(
    claim: Callable[..., Claim], tmp_path: Path, case: str
) -> None:
    c, uuid = contained_claim(claim)
    claims_dir, uid = PATHS[case]
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    mounts = f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
    source = limits_source(tmp_path / claims_dir)
    assert "\t" not in source and "\n" not in source and " " not in source  # escaped, as mountinfo does
    out = contained(
        c,
        tmp_path,
        "pass",
        6 * MIB,
        pod_mounts=mounts,
        claims_dir=claims_dir,
        uid=uid,
        CARVE_REGION="",
        CARVE_LIMITS_SOURCE=source,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_SUCCESS), out.stderr  # trusted: the plugin's 8 MiB hold
