"""A file mounted read-write over the plugin's limits file is not trusted, though the directory it sits in is
still the plugin's own read-only mount (limits.c, carve_limits_read: the file read must be on a read-only
filesystem, `vfs.f_flag & ST_RDONLY` of the descriptor itself). The mountinfo check looks at the mount of
the limits directory only; a bind mount of a single file on top of `limits/limits`, from the same device,
passes it, and only the file's own mount tells it apart.

The file mounted over it names the claim's GPU without a limit; the pod's own limits directory names it
with 4 MiB. Untrusted, the tightest file holds and 6 MiB do not fit; were the mounted file trusted, its
missing limit would win over every untrusted file."""

from __future__ import annotations

import shlex

from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits

from driver.limits import ClaimLimits, DeviceLimit, write_limits

CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_file_mounted_read_write_over_the_plugins_limits_file_is_not_trusted(claim, tmp_path) -> None:
    c, uuid = contained_claim(claim)
    pods = forged_limits(tmp_path, uuid, 4 * MIB)
    # on the same filesystem as the plugin's claims directory (tmp_path), so its device matches; mode 0444
    unlimited = tmp_path / "unlimited" / "limits"
    write_limits(unlimited, ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x"))
    plugins_file = f"/var/run/carve/{UID}/limits/limits"
    setup = (
        f"mkdir -p /run/carve/000-forged && cp -r {pods} {pods}/../region /run/carve/000-forged/"
        f" && mount --bind {shlex.quote(str(unlimited))} {plugins_file}"  # read-write, as a bind mount is
    )
    out = contained(c, tmp_path, "pass", 6 * MIB, pod_mounts=setup, CARVE_REGION="")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the pod's 4 MiB hold
