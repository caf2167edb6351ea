"""The plugin's read-only mount is trusted whatever per-mount options follow "ro" in mountinfo, and only
"ro" alone or "ro" then a comma counts as read-only (limits.c, read_only).

The kernel writes a mount's per-mount options "ro" or "rw" first, then the others after commas
(fs/proc_namespace.c, show_mountinfo): a runtime's bind mount reads `ro,nosuid,nodev,relatime`, and a mount
whose atime flags were cleared (strictatime) reads `ro` alone, with nothing after it. Both are the plugin's
own mount and must be trusted; a test that only ever sees `ro,relatime` cannot tell a check for the comma
from one for the end of the field.

The pod's own writable limits directory names the GPU with 4 MiB, the plugin's file 8 MiB; 6 MiB fit only
where the plugin's mount is trusted (untrusted, the tightest file holds)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits

CUDA_SUCCESS = 0

# remount options for the plugin's limits mount, and how the per-mount options mountinfo then shows begin
# (the atime flag a mount shows after the others depends on the system's defaults)
OPTIONS = {
    "ro-alone": ("ro,strictatime", "ro\n"),  # no atime flag: nothing after "ro"
    "ro-then-others": ("ro,nosuid,nodev,noexec", "ro,nosuid,nodev,noexec"),
}


@pytest.mark.parametrize("options", sorted(OPTIONS))
def test_the_plugins_mount_is_trusted_with_ro_alone_or_ro_then_other_options(
    claim: Callable[..., Claim], tmp_path: Path, options: str
) -> None:
    c, uuid = contained_claim(claim)
    forged = forged_limits(tmp_path, uuid, 4 * MIB)
    remount, shown = OPTIONS[options]
    mount_point = f"/run/carve/{UID}/limits"
    setup = (
        f"mkdir -p /run/carve/000-forged && cp -r {forged} {forged}/../region /run/carve/000-forged/"
        f" && mount -o remount,bind,{remount} {mount_point}"
        # the options as the limiter reads them, printed so the test can check it made the case it means
        f" && grep -F ' {mount_point} ' /proc/self/mountinfo | cut -d' ' -f6 | sed 's/^/options /' >&2"
    )
    out = contained(c, tmp_path, "pass", 6 * MIB, pod_mounts=setup, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert f"options {shown}" in out.stderr, out.stderr  # the mount carries the options meant
    assert out.stdout.strip() == str(CUDA_SUCCESS), out.stderr  # trusted: the plugin's 8 MiB hold
