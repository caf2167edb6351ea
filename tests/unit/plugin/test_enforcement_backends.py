"""Choosing the memory enforcement backend per GPU (driver/plugin/enforcement/backends.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from driver.devices.catalog import fake_gpu
from driver.plugin.enforcement.backends import CgroupV2, EnforcementError, choose, probe_cgroup_v2

V2 = CgroupV2("/sys/fs/cgroup")


def _gpu(index: int, limits: bool = True, **kw):
    kw.setdefault("mig_enabled", False)
    return dataclasses.replace(fake_gpu("A100-80GB", index), memory_limits=limits, **kw)


def test_auto_takes_the_driver_where_it_can():
    able, old, mig = _gpu(0), _gpu(1, limits=False), _gpu(2, mig_enabled=True)
    assert choose("auto", [able, old, mig], V2) == {able.uuid}


def test_auto_on_a_cgroup_v1_node_takes_the_limiter_everywhere():
    assert choose("auto", [_gpu(0)], None) == frozenset()


def test_limiter_never_uses_the_driver():
    assert choose("limiter", [_gpu(0)], V2) == frozenset()


def test_driver_names_every_gpu_that_cannot():
    with pytest.raises(EnforcementError, match=r"gpu-1 .*NOT_SUPPORTED.*gpu-2 .*MIG mode"):
        choose("driver", [_gpu(0), _gpu(1, limits=False), _gpu(2, mig_enabled=True)], V2)
    with pytest.raises(EnforcementError, match="cgroup v1 only"):
        choose("driver", [_gpu(0)], None)


def test_unknown_mode_is_refused():
    with pytest.raises(EnforcementError, match="expected one of auto, driver, limiter"):
        choose("strict", [_gpu(0)], V2)


def _proc(tmp_path: Path, cgroup: str, mountinfo: str) -> Path:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "cgroup").write_text(cgroup)
    (tmp_path / "self" / "mountinfo").write_text(mountinfo)
    return tmp_path


def test_probe_finds_the_unified_hierarchy(tmp_path):
    proc = _proc(
        tmp_path,
        "0::/system.slice/kubelet.service\n",
        "30 24 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
    )
    assert probe_cgroup_v2(proc) == CgroupV2("/sys/fs/cgroup")


def test_probe_finds_a_hybrid_hosts_v2_mount(tmp_path):
    proc = _proc(
        tmp_path,
        "12:memory:/kubepods\n1:name=systemd:/init.scope\n0::/init.scope\n",
        "25 24 0:22 / /sys/fs/cgroup ro shared:5 - tmpfs tmpfs ro\n"
        "26 25 0:23 / /sys/fs/cgroup/unified rw shared:6 - cgroup2 cgroup2 rw\n"
        "27 25 0:24 / /sys/fs/cgroup/memory rw shared:7 - cgroup cgroup rw,memory\n",
    )
    assert probe_cgroup_v2(proc) == CgroupV2("/sys/fs/cgroup/unified")


def test_probe_on_a_v1_only_host_finds_nothing(tmp_path):
    proc = _proc(
        tmp_path, "12:memory:/kubepods\n", "27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw\n"
    )
    assert probe_cgroup_v2(proc) is None
