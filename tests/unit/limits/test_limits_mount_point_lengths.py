"""CARVE_LIMITS_SOURCE's path below a mount point is what follows the mount point and its slash, whatever
the mount point's length (a mount point of an odd length, /data, as well as an even one, /data1)."""

from __future__ import annotations

import pytest

from driver.limits.mounts import limits_source

MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 8:1 /volumes/a /data rw,relatime - ext4 /dev/sda1 rw
31 22 8:2 /volumes/b /data1 rw,relatime - ext4 /dev/sda2 rw
32 22 8:3 /volumes/c /srv/abc rw,relatime - ext4 /dev/sda3 rw
"""


@pytest.mark.parametrize(("claims", "source"), [
    ("/data/claims", "8:1:/volumes/a/claims"),
    ("/data1/claims/x", "8:2:/volumes/b/claims/x"),
    ("/srv/abc/c", "8:3:/volumes/c/c"),
    ("/data", "8:1:/volumes/a"),
])
def test_the_path_below_a_mount_point_of_any_length(tmp_path, claims, source):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert limits_source(claims, info) == source
