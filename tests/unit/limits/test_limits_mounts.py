"""CARVE_LIMITS_SOURCE: the device and filesystem root of the plugin's claims directory, from mountinfo."""

from __future__ import annotations

import pytest

from driver.limits.mounts import MountError, escape, limits_source, parse_mountinfo, unescape

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
