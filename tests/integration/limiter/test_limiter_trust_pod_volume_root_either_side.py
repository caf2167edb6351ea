"""A pod's read-only volume of the plugin's own device is not trusted whichever way its root sorts against
the plugin's claim root (limits.c, mount_is_plugins: `strcmp(root, want_root) == 0`, equal and nothing
else).

test_limiter_escape.py's "read-only-volume" mount has a root (<tmp>/forged/limits) that sorts after the
plugin's (<tmp>/claims/...): a check that only refused roots sorting after would pass it. Here the pod's
directory is mounted read-only at /run/carve/000-x/limits from a root sorting before the plugin's claims
directory ("aaa", against "claims") and from one sorting after ("zzz"). Its file names the GPU without a
limit; the plugin's claim names it with 8 MiB and is trusted: 9 MiB do not fit. Were the pod's volume
trusted, it would come first and lift the limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from limiter_harness import Claim
from test_limiter_escape import MIB, contained, contained_claim

from driver.limits import ClaimLimits, DeviceLimit, create_region, write_limits

CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.mark.parametrize("name", ["aaa", "zzz"])
def test_a_pod_volume_of_the_plugins_device_is_not_trusted_whichever_way_its_root_sorts(
    claim: Callable[..., Claim], tmp_path: Path, name: str
) -> None:
    c, uuid = contained_claim(claim)
    pods = tmp_path / name / "000-x"  # beside the plugin's claims directory, on the same disk
    unlimited = ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x")
    write_limits(pods / "limits" / "limits", unlimited)  # mode 0444
    create_region(pods / "region", unlimited)
    assert (str(pods) < str(tmp_path / "claims")) == (name == "aaa")  # the case meant
    mounts = (
        f"mkdir -p /run/carve/000-x/limits && cp {pods}/region /run/carve/000-x/"
        f" && mount --bind {pods}/limits /run/carve/000-x/limits"
        " && mount -o remount,bind,ro /run/carve/000-x/limits"
    )
    out = contained(c, tmp_path, "pass", 9 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the plugin's 8 MiB hold
