"""In a container on a hybrid cgroup host, runc mounts the v1 controllers first, in /proc/self/cgroup's order,
and the unified (cgroup2) hierarchy last, since its `0::` line comes last; other file systems whose type sorts
before cgroup2 (bpf, btrfs, autofs) may be listed before it too. The probe for the driver's memory
enforcement (driver/plugin/enforcement/backends.py, `probe_cgroup_v2`) takes the cgroup2 mount alone, by its
type, never one of those listed before it."""

from __future__ import annotations

from pathlib import Path

from driver.plugin.enforcement.backends import CgroupV2, probe_cgroup_v2

CGROUPS = "12:memory:/kubepods/pod1\n11:blkio:/kubepods/pod1\n1:name=systemd:/kubepods/pod1\n0::/\n"
MOUNTINFO = (
    "700 690 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
    "710 700 0:52 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "711 710 0:28 /kubepods/pod1 /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
    "712 710 0:29 /kubepods/pod1 /sys/fs/cgroup/blkio ro,nosuid - cgroup cgroup rw,blkio\n"
    "713 710 0:30 /kubepods/pod1 /sys/fs/cgroup/systemd ro,nosuid - cgroup cgroup rw,name=systemd\n"
    "714 700 0:31 / /sys/fs/bpf rw,nosuid - bpf bpf rw,mode=700\n"
    "715 700 259:2 /var/lib/kubelet /var/lib/kubelet rw - btrfs /dev/nvme0n1p2 rw\n"
    "716 710 0:27 / /sys/fs/cgroup/unified ro,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
)


def test_the_unified_mount_is_found_after_v1_controllers_and_other_file_systems(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "cgroup").write_text(CGROUPS)
    (tmp_path / "self" / "mountinfo").write_text(MOUNTINFO)
    assert probe_cgroup_v2(tmp_path) == CgroupV2("/sys/fs/cgroup/unified")
