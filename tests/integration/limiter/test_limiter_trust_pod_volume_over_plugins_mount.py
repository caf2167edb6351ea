"""A pod's read-only volume mounted over the plugin's limits directory, at the plugin's own mount point, is
not trusted: the last mountinfo entry at a mount point is the one on top, and it decides (limits.c,
mount_is_plugins reads every entry and keeps the last; stopping at the plugin's, the first, would trust
whatever was mounted over it).

The pod's volume comes from the plugin's own disk (so the file's device is the plugin's), read-only, its
file mode 0444, naming the GPU without a limit; the pod's writable limits directory names it with 4 MiB.
Untrusted, the tightest file holds and 6 MiB do not fit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from limiter_harness import Claim
from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits

from driver.limits import ClaimLimits, DeviceLimit, write_limits

CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_pod_volume_mounted_over_the_plugins_limits_directory_is_not_trusted(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    c, uuid = contained_claim(claim)
    pods = forged_limits(tmp_path, uuid, 4 * MIB)
    volume = tmp_path / "volume" / "limits"
    write_limits(volume / "limits", ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x"))  # mode 0444
    mount_point = f"/run/carve/{UID}/limits"
    mounts = (
        f"mkdir -p /run/carve/000-forged && cp -r {pods} {pods}/../region /run/carve/000-forged/"
        f" && mount --bind {volume} {mount_point} && mount -o remount,bind,ro {mount_point}"
        # the case meant: two entries at the plugin's mount point, the pod's last
        f" && grep -c ' {mount_point} ' /proc/self/mountinfo | sed 's/^/entries /' >&2"
    )
    out = contained(c, tmp_path, "pass", 6 * MIB, pod_mounts=mounts, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert "entries 2\n" in out.stderr, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the pod's 4 MiB hold
