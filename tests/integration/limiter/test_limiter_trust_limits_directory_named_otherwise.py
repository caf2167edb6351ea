"""A limits directory is trusted only where its canonical path is <dir>/<uid>/limits, the plugin's mount
point (limits.c, mount_is_plugins: the last component must be "limits"), not wherever a mount of the
plugin's claim directory happens to sit.

A claim's "limits" may be a symlink; the limiter resolves it and looks up the mount at the real place.
Here it leads to /run/x/<uid>/<name>, a read-only mount of another claim's limits directory of the
plugin's (the plugin's device, root <claims>/<uid>/limits: what the limiter would want for a mount point
<...>/<uid>/limits). Its file names the GPU without a limit; the plugin's own claim, mounted as the CDI
spec does, names it with 8 MiB. Named otherwise than "limits", the mount is not the plugin's mount point
and its file is untrusted: the trusted 8 MiB hold and 9 MiB do not fit. The names sort before and after
"limits", so neither order of the comparison passes for them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, contained, contained_claim, forged_limits

from driver.limits import ClaimLimits, DeviceLimit, write_limits

CUDA_ERROR_OUT_OF_MEMORY = 2
OTHER = "1e1d1c1b-other"  # another claim of the plugin's


@pytest.mark.parametrize("name", ["aaa", "zzz"])
def test_a_limits_directory_whose_real_name_is_not_limits_is_not_trusted(
    claim: Callable[..., Claim], tmp_path: Path, name: str
) -> None:
    c, uuid = contained_claim(claim)
    # the other claim's limits file in the plugin's claims directory (contained adds the claim's own)
    other = tmp_path / "claims" / OTHER / "limits"
    write_limits(other / "limits", ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x"))
    forged = forged_limits(tmp_path, uuid, 0)  # only its region is used: a claim directory needs one
    mounts = (
        f"mkdir -p /run/x/{OTHER}/{name} /run/carve/000-x && cp {forged}/../region /run/carve/000-x/"
        f" && mount --bind {other} /run/x/{OTHER}/{name} && mount -o remount,bind,ro /run/x/{OTHER}/{name}"
        f" && ln -s /run/x/{OTHER}/{name} /run/carve/000-x/limits"
    )
    out = contained(c, tmp_path, "pass", 9 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the plugin's 8 MiB hold
