"""A file of another filesystem mounted read-only over the plugin's limits file is not trusted, though the
directory it sits in is still the plugin's own read-only mount (limits.c, mount_is_plugins: the file read
must be on that mount's device, `makedev(ma, mi) == dev`).

test_limiter_limits_file_mounted_over_untrusted.py mounts a file of the plugin's own device read-write
over it, which the file's own read-only flag already tells apart. Here the file comes from a tmpfs and its
bind mount is read-only: mode 0444, read-only, its directory's mountinfo entry the plugin's in every field;
only its device differs from that entry's. It names the GPU without a limit; the pod's own writable
limits directory names it with 4 MiB. Untrusted, the tightest file holds and 6 MiB do not fit; were the
mounted file trusted, its missing limit would win over every untrusted file. Both ways round: the claims
directory on the test's temporary disk and the file from a tmpfs, and the claims directory on a tmpfs and
the file from that disk; where the temporary directory is on a disk (a device number above a tmpfs's), the
two tests hold the file's device below and above the directory's, so neither order of the comparison
passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from limiter_harness import Claim
from test_limiter_escape import MIB, UID, contained, contained_claim, forged_limits
from test_limiter_trust_claims_at_a_filesystems_root import on_a_filesystem_of_its_own

from driver.limits import ClaimLimits, DeviceLimit, write_limits

CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_file_of_another_device_mounted_read_only_over_the_plugins_is_not_trusted(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    c, uuid = contained_claim(claim)
    pods = forged_limits(tmp_path, uuid, 4 * MIB)
    unlimited = tmp_path / "unlimited" / "limits"
    write_limits(unlimited, ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x"))  # mode 0444
    plugins_file = f"/var/run/carve/{UID}/limits/limits"
    setup = (
        f"mkdir -p /run/carve/000-forged && cp -r {pods} {pods}/../region /run/carve/000-forged/"
        # the unlimited file on a tmpfs of its own, mounted read-only over the plugin's file
        f" && mkdir -p /run/other && mount -t tmpfs tmpfs /run/other && cp -p {unlimited} /run/other/limits"
        f" && mount --bind /run/other/limits {plugins_file} && mount -o remount,bind,ro {plugins_file}"
        # the case meant: the file's device differs from its directory's, and it is read-only
        f" && stat -c 'file dev %d' {plugins_file} >&2"
        f" && stat -c 'directory dev %d' /var/run/carve/{UID}/limits >&2"
        f" && {{ touch {plugins_file} 2>/dev/null || echo read-only >&2; }}"
    )
    out = contained(
        c, tmp_path, "pass", 6 * MIB, pod_mounts=setup.replace("{", "{{").replace("}", "}}"), CARVE_REGION=""
    )
    assert out.returncode == 0, out.stderr
    devices = dict(line.rsplit(" ", 1) for line in out.stderr.splitlines() if " dev " in line)
    assert devices["file dev"] != devices["directory dev"] and "read-only" in out.stderr, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the pod's 4 MiB hold


def test_a_file_of_the_disk_mounted_read_only_over_the_plugins_on_a_tmpfs_is_not_trusted(
    claim: Callable[..., Claim], tmp_path: Path
) -> None:
    c, uuid = contained_claim(claim)
    unlimited = tmp_path / "unlimited" / "limits"  # on the disk
    write_limits(unlimited, ClaimLimits((DeviceLimit(0, 0, uuid=uuid),), "/x"))
    plugins_file = f"/var/run/carve/{UID}/limits/limits"
    over = (
        f"mount --bind {unlimited} {plugins_file} && mount -o remount,bind,ro {plugins_file}\n"
        f"stat -c 'file dev %d' {plugins_file} >&2\n"
        f"stat -c 'directory dev %d' /var/run/carve/{UID}/limits >&2"
    )
    out = on_a_filesystem_of_its_own(c, tmp_path, 6 * MIB, pod_mounts=over)
    assert out.returncode == 0, out.stderr
    devices = dict(line.rsplit(" ", 1) for line in out.stderr.splitlines() if " dev " in line)
    assert devices["file dev"] != devices["directory dev"] and "st_rdonly 1" in out.stderr, out.stderr
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # the pod's 4 MiB hold
