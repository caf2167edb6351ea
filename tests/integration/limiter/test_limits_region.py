"""The Python mirror of the shared region: same layout as the C header, atomic creation, live changes."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess

import pytest
from limiter_harness import BUILD

from driver.limits import (
    ClaimLimits,
    ClaimRuntime,
    DeviceLimit,
    Region,
    RegionError,
    create_region,
    limitsfile,
    read_limits,
    write_limits,
)
from driver.limits import region as region_mod

PROBE = BUILD / "tests" / "limits_region_probe"


def test_python_layout_matches_the_c_header():
    if not PROBE.exists():
        pytest.fail(f"{PROBE} missing: run `make native`")
    c = json.loads(subprocess.run([str(PROBE)], capture_output=True, text=True, check=True).stdout)
    structs = {
        "carve_region_t": region_mod.RegionStruct,
        "carve_region_device_t": region_mod.DeviceStruct,
        "carve_region_proc_t": region_mod.ProcStruct,
        "carve_limits_t": limitsfile.LimitsStruct,
        "carve_limits_device_t": limitsfile.LimitsDeviceStruct,
    }
    assert {name: ctypes.sizeof(s) for name, s in structs.items()} == c["sizeof"]
    py_fields = {
        f"{cname}.{fname}": [getattr(s, fname).offset, getattr(s, fname).size]
        for cname, s in structs.items()
        for fname, _ in s._fields_
    }
    assert py_fields == c["fields"]
    assert (c["magic"], c["version"]) == (region_mod.MAGIC, region_mod.VERSION)
    assert (c["limits_magic"], c["limits_version"]) == (limitsfile.LIMITS_MAGIC, limitsfile.LIMITS_VERSION)
    assert (c["max_procs"], c["max_devices"]) == (region_mod.MAX_PROCS, 16)


def make_limits(path, **kw) -> ClaimLimits:
    devices = (DeviceLimit(4 << 30, 30, uuid="GPU-1234"), DeviceLimit(0, 0))
    return ClaimLimits(devices=devices, region_path=str(path), **kw)


def test_created_region_carries_the_limits(tmp_path):
    path = tmp_path / "region"
    create_region(path, make_limits(path, core_policy="force", priority="low", oom_policy="kill"))
    assert path.stat().st_mode & 0o777 == 0o666
    assert not list(tmp_path.glob(".*tmp"))
    with Region.open(path) as r:
        assert r.device_count == 2
        assert (r.memory_limit(0), r.cores_limit(0), r.used_bytes(0)) == (4 << 30, 30, 0)
        assert (r.memory_limit(1), r.cores_limit(1)) == (0, 0)
        s = r._struct
        assert (s.core_policy, s.priority, s.oom_policy, s.flags) == (1, 1, 1, region_mod.FROM_PLUGIN)
        assert s.devices[0].uuid == b"GPU-1234"


def test_limits_file_is_written_atomically_read_only_and_bumps_its_generation(tmp_path):
    path = tmp_path / "limits" / "limits"
    limits = make_limits(tmp_path / "region", core_policy="force", priority="low")
    write_limits(path, limits)
    assert path.stat().st_mode & 0o777 == 0o444 and not list(path.parent.glob(".*tmp"))
    first = read_limits(path)
    assert (first.memory_limits, first.cores_limits, first.uuids) == ((4 << 30, 0), (30, 0), ("GPU-1234", ""))
    assert (first.core_policy, first.priority, first.generation) == ("force", "low", 1)
    write_limits(path, limits, ClaimRuntime(shares=(30, 40), high_neighbours=(0, 2)))
    second = read_limits(path)
    assert (second.cores_limits, second.cores_reserved, second.high_neighbours) == ((30, 40), (30, 0), (0, 2))
    assert second.generation == 2


@pytest.mark.parametrize("kind", ["symlink", "fifo", "oversized"])
def test_container_writable_files_are_opened_as_untrusted(tmp_path, kind):
    path = tmp_path / "region"
    create_region(tmp_path / "real", make_limits(path))
    if kind == "symlink":
        path.symlink_to(tmp_path / "real")
    elif kind == "fifo":
        os.mkfifo(path)  # opening it blocking would hang the watcher
    else:
        path.write_bytes((tmp_path / "real").read_bytes() + b"\0" * 4096)
    problem = {"symlink": "symlink", "fifo": "not a regular file", "oversized": "size is"}[kind]
    with pytest.raises(RegionError, match=problem):
        Region.open(path)
    if kind == "oversized":  # the watcher cuts it back: the host space a container can fill is bounded
        with Region.open(path, cut_oversized=True) as r:
            assert r.device_count == 2
        assert path.stat().st_size == region_mod.REGION_SIZE


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda b: b[:100], "size is 100 bytes"),
        (lambda b: b"X" * 8 + b[8:], "magic"),
        (lambda b: b[:8] + (9).to_bytes(4, "little") + b[12:], "version is 9"),
    ],
)
def test_foreign_or_corrupt_region_is_refused_with_the_reason(tmp_path, mutate, problem):
    path = tmp_path / "region"
    create_region(path, make_limits(path))
    path.write_bytes(mutate(path.read_bytes()))
    with pytest.raises(RegionError, match=problem):
        Region.open(path)


def test_missing_region_is_a_region_error(tmp_path):
    with pytest.raises(RegionError, match="cannot open"):
        Region.open(tmp_path / "absent")


def test_host_pids_are_resolved_from_the_pid_namespace(tmp_path):
    path = tmp_path / "region"
    create_region(path, make_limits(path))
    with Region.open(path) as r:
        slot = r._struct.procs[3]
        slot.pid, slot.host_pid = os.getpid(), 0
        slot.pid_ns = os.stat("/proc/self/ns/pid").st_ino
        assert r.resolve_host_pids() == 1
        assert r.processes()[0].host_pid == os.getpid()
        del slot
