"""Survivors of generated mutants in driver/limits (docs/testing.md, "Generated mutants"), killed through
what the plugin and the limiter see: where a claim's limits file lives, an effective share out of range,
a mountinfo line whose device number is not numbers, memory past a uint64, a region header's size, a uuid
of 48 bytes, blocks a tenant allocated past its region's end."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from driver.limits import (
    ClaimLimits,
    ClaimRuntime,
    DeviceLimit,
    create_region,
    limits_path_for,
    read_limits,
    write_limits,
)
from driver.limits.env import LimitsError
from driver.limits.mounts import parse_mountinfo
from driver.limits.region import REGION_SIZE, Region, RegionError, RegionStruct


def test_the_limits_file_is_limits_limits_beside_the_region(tmp_path):
    # the limiter (native/src/limits.c) opens <region dir>/limits/limits; the plugin writes it there
    assert limits_path_for("/var/run/carve/uid-1/region") == Path("/var/run/carve/uid-1/limits/limits")
    region = tmp_path / "claim" / "region"
    path = limits_path_for(region)
    write_limits(path, ClaimLimits((DeviceLimit(1 << 30, 40),), str(region)))
    assert path == tmp_path / "claim" / "limits" / "limits"
    assert read_limits(path).cores_limits[0] == 40


@pytest.mark.parametrize("share", [-1, 101])
def test_an_effective_share_out_of_0_to_100_is_refused_naming_the_device(tmp_path, share):
    path = tmp_path / "limits" / "limits"
    limits = ClaimLimits((DeviceLimit(1 << 30, 50), DeviceLimit(1 << 30, 50)), "/r")
    with pytest.raises(RegionError, match=rf"devices\[1\] effective share {share} is not in 0..100"):
        write_limits(path, limits, ClaimRuntime(shares=(50, share)))
    assert not path.exists()  # nothing half-written
    for edge in (0, 100):  # both ends are valid
        write_limits(path, limits, ClaimRuntime(shares=(edge, edge)))
        assert read_limits(path).cores_limits[:2] == (edge, edge)


def test_a_mountinfo_line_whose_device_is_not_two_numbers_is_skipped():
    lines = [
        "30 22 8:x /a /a rw - ext4 /dev/sda1 rw",  # minor not a number
        "31 22 y:1 /b /b rw - ext4 /dev/sda1 rw",  # major not a number
        "32 22 8:2 /c /c rw - ext4 /dev/sda2 rw",
    ]
    (entry,) = parse_mountinfo("\n".join(lines))
    assert (entry.major, entry.minor, entry.mount_point) == (8, 2, "/c")


def test_memory_of_2_to_the_64_bytes_is_refused_and_one_less_is_kept(tmp_path):
    # the limits file's memory_limit is a uint64: 2**64 would wrap to "unlimited" (0)
    region = tmp_path / "region"
    too_big = r"limits.devices\[0\].memory_bytes: 18446744073709551616 is out of range"
    with pytest.raises(LimitsError, match=too_big):
        create_region(region, ClaimLimits((DeviceLimit(1 << 64, 0),), str(region)))
    create_region(region, ClaimLimits((DeviceLimit((1 << 64) - 1, 0),), str(region)))
    assert Region.open(region).device_count == 1


@pytest.mark.parametrize("delta", [-8, 8])
def test_a_region_whose_header_gives_another_size_is_refused(tmp_path, delta):
    region = tmp_path / "region"
    create_region(region, ClaimLimits((DeviceLimit(1 << 30, 50),), str(region)))
    data = bytearray(region.read_bytes())
    s = RegionStruct.from_buffer(data)
    s.size = REGION_SIZE + delta
    del s
    region.write_bytes(bytes(data))
    with pytest.raises(RegionError, match=f"size field is {REGION_SIZE + delta}, expected {REGION_SIZE}"):
        Region.open(region)


def test_a_uuid_of_48_bytes_is_refused_and_47_round_trips(tmp_path):
    # the files keep it in char[48] with its NUL: 47 bytes is the longest the limiter can compare
    path = tmp_path / "limits" / "limits"
    longest = "GPU-" + "a" * 43
    write_limits(path, ClaimLimits((DeviceLimit(1 << 30, 0, uuid=longest),), "/r"))
    assert read_limits(path).uuids[0] == longest
    with pytest.raises(LimitsError, match=r"limits.devices\[0\].uuid: 'GPU-a+b' is longer than 47 bytes"):
        write_limits(path, ClaimLimits((DeviceLimit(1 << 30, 0, uuid=longest + "b"),), "/r"))
    assert read_limits(path).uuids[0] == longest  # the file in place is untouched


def test_opening_a_region_a_tenant_grew_past_its_end_gives_the_blocks_back(tmp_path):
    # the plugin opens the claim's region with cut_oversized: blocks allocated past the end with
    # fallocate(FALLOC_FL_KEEP_SIZE) (st_size unchanged) are freed, the region's own bytes stay
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    region = tmp_path / "region"
    create_region(region, ClaimLimits((DeviceLimit(1 << 30, 50),), str(region)))
    content = region.read_bytes()
    fd = os.open(region, os.O_RDWR)
    try:
        assert libc.fallocate(fd, 1, 0, REGION_SIZE + (8 << 20)) == 0, ctypes.get_errno()  # KEEP_SIZE
    finally:
        os.close(fd)
    grown = region.stat().st_blocks * 512
    assert grown >= 8 << 20
    with Region.open(region):  # not cut: the file is read as it is
        pass
    assert region.stat().st_blocks * 512 == grown
    with Region.open(region, cut_oversized=True):
        pass
    st = region.stat()
    assert st.st_size == REGION_SIZE and st.st_blocks * 512 < REGION_SIZE + (64 << 10), st.st_blocks
    assert region.read_bytes() == content


def test_a_containers_init_process_pid_1_is_listed_with_its_usage(tmp_path):
    # in its own pid namespace a container's main process is pid 1: the limiter gives it a slot like any
    # other, and the plugin's attribution must see it (a free slot has pid 0)
    region = tmp_path / "region"
    create_region(region, ClaimLimits((DeviceLimit(1 << 30, 50),), str(region)))
    data = bytearray(region.read_bytes())
    s = RegionStruct.from_buffer(data)
    s.procs[3].pid, s.procs[3].pid_ns, s.procs[3].used[0] = 1, 4026531836, 5 << 20
    del s
    region.write_bytes(bytes(data))
    with Region.open(region) as r:
        (p,) = r.processes()
    assert (p.pid, p.host_pid, p.used, p.pid_ns) == (1, 0, (5 << 20,), 4026531836)


def test_a_negative_cores_percent_is_refused_naming_the_field(tmp_path):
    with pytest.raises(LimitsError, match=r"limits.devices\[0\].cores_percent: -1 is not in 0..100"):
        write_limits(tmp_path / "limits", ClaimLimits((DeviceLimit(1 << 30, -1),), "/r"))
