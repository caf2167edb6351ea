"""CARVE_LIMITS_SOURCE: the device and filesystem root of the plugin's claims directory, from mountinfo."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from driver.limits.mounts import MountError, escape, limits_source, parse_mountinfo, unescape

REPO = Path(__file__).resolve().parents[3]

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 8:1 /var/lib/kubelet /var/lib/kubelet rw,relatime - ext4 /dev/sda1 rw
31 30 8:1 /data/plugins /var/lib/kubelet/plugins rw,relatime - ext4 /dev/sda1 rw
32 30 8:2 / /var/lib/kubelet/plugins rw,relatime - xfs /dev/sdb1 rw
40 22 0:50 /with\\040space /srv/x\\040y rw - tmpfs tmpfs rw
"""


@pytest.fixture
def info(tmp_path):
    path = tmp_path / "mountinfo"
    path.write_text(MOUNTINFO)
    return path


def test_the_last_mount_over_the_longest_mount_point_decides(info):
    # /var/lib/kubelet/plugins has two mounts; the later (8:2, an xfs volume) is on top
    assert limits_source("/var/lib/kubelet/plugins/gpu.carve.dev/claims", info) == "8:2:/gpu.carve.dev/claims"
    # a path under the kubelet's mount only: its root, then the path below the mount point
    assert limits_source("/var/lib/kubelet/pods", info) == "8:1:/var/lib/kubelet/pods"
    assert limits_source("/opt/carve", info) == "0:21:/opt/carve"


def test_escapes_are_read_and_written_as_mountinfo_does(info):
    assert limits_source("/srv/x y/claims", info) == "0:50:/with\\040space/claims"
    assert unescape(escape("a b\tc\\d\ne")) == "a b\tc\\d\ne"
    (entry,) = parse_mountinfo("1 2 3:4 /r\\134oot /m\\011p ro - tmpfs t ro\n")
    assert (entry.major, entry.minor, entry.root, entry.mount_point) == (3, 4, "/r\\oot", "/m\tp")


def test_no_mountinfo_is_an_error(tmp_path):
    with pytest.raises(MountError):
        limits_source("/x", tmp_path / "missing")


# A node's mountinfo in the shape the kernel writes it: a data volume at /data, and the plugin's directory
# on /data2, a directory of the root filesystem whose name only starts with "/data".
NODE_MOUNTINFO = """\
24 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
25 24 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
26 24 0:5 / /dev rw,nosuid shared:8 - devtmpfs udev rw,size=32G,nr_inodes=8M,mode=755
27 26 0:24 / /dev/shm rw,nosuid,nodev shared:9 - tmpfs tmpfs rw
30 24 259:5 / /data rw,relatime shared:12 - xfs /dev/nvme1n1 rw,attr2,inode64,noquota
31 24 0:26 / /run rw,nosuid,nodev,noexec,relatime shared:13 - tmpfs tmpfs rw,size=6G,mode=755
"""


def test_a_mount_point_that_is_only_a_string_prefix_does_not_hold_the_path(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(NODE_MOUNTINFO)
    # /data is not above /data2/carve: the claims directory is on the root filesystem
    assert limits_source("/data2/carve/claims", info) == "259:2:/data2/carve/claims"
    assert limits_source("/data/carve/claims", info) == "259:5:/carve/claims"
    assert limits_source("/data", info) == "259:5:/"
    assert limits_source("/run2/x", info) == "259:2:/run2/x"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_the_source_names_the_device_the_kernel_reports_for_the_claims_directory(tmp_path):
    # In a private mount namespace, a tmpfs on <tmp>/data and the claims directory under <tmp>/data2: the
    # source computed from the real /proc/self/mountinfo must name the device stat() gives the directory
    # (what the limiter checks its limits file against), not the tmpfs whose mount point is a prefix.
    script = (
        "import os, sys\n"
        "from driver.limits.mounts import limits_source\n"
        "claims = sys.argv[1]\n"
        "st = os.stat(claims)\n"
        "print(limits_source(claims), f'{os.major(st.st_dev)}:{os.minor(st.st_dev)}')\n"
    )
    base = tmp_path / "node"
    claims = base / "data2" / "carve" / "claims"
    claims.mkdir(parents=True)
    (base / "data").mkdir()
    cmd = (f"mount -t tmpfs carve-test {base / 'data'} && "
           f"exec {sys.executable} -c {shlex.quote(script)} {claims}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", cmd],
                         capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    source, device = out.stdout.split()
    assert source.startswith(device + ":"), (source, device)
    assert source.endswith("/data2/carve/claims")


def test_malformed_lines_are_skipped_and_the_lines_after_them_still_count(tmp_path):
    # A line cut short (five fields: no options) or without major:minor names no mount; the lines after it
    # are read all the same (a generated mutant that stopped at the first bad line, or took the short line
    # as the longest mount, survived the suite).
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw - overlay overlay rw\n"
        "garbage\n"
        "23 22 9:9 / /srv\n"
        "30 22 8:1 / /srv rw,relatime - ext4 /dev/sda1 rw\n"
    )
    assert limits_source("/srv/claims", info) == "8:1:/claims"
    assert [(e.major, e.minor, e.mount_point) for e in parse_mountinfo(info.read_text())] == [
        (0, 21, "/"), (8, 1, "/srv")]
