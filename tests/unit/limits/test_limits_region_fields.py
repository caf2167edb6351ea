"""A region's fields read back as what they are when a tenant (who can write its own region) puts values
there the plugin never writes: a policy or priority past its table, a device index out of range (survivors
of generated mutants in driver/limits/region.py)."""

from __future__ import annotations

import pytest

from driver.limits import ClaimLimits, DeviceLimit, create_region, read_limits, write_limits
from driver.limits.env import CORE_POLICIES, PRIORITIES, LimitsError
from driver.limits.limitsfile import LIMITS_VERSION, LimitsStruct
from driver.limits.region import Region, RegionError, RegionStruct


def _region(tmp_path, **fields):
    region = tmp_path / "region"
    create_region(region, ClaimLimits((DeviceLimit(1 << 30, 50, uuid="GPU-0"),), str(region)))
    data = bytearray(region.read_bytes())
    s = RegionStruct.from_buffer(data)
    for name, value in fields.items():
        setattr(s, name, value)
    del s
    region.write_bytes(bytes(data))
    return region


@pytest.mark.parametrize("past", [0, 1, 200])
def test_a_core_policy_or_priority_past_its_table_reads_as_unknown(tmp_path, past):
    policy, priority = len(CORE_POLICIES) + past, len(PRIORITIES) + past
    with Region.open(_region(tmp_path, core_policy=policy, priority=priority)) as r:
        assert (r.core_policy, r.priority) == (f"unknown({policy})", f"unknown({priority})")
    with Region.open(_region(tmp_path, core_policy=len(CORE_POLICIES) - 1, priority=1)) as r:
        assert (r.core_policy, r.priority) == (CORE_POLICIES[-1], PRIORITIES[1])


@pytest.mark.parametrize("device", [-1, 1, 16])
def test_a_device_index_out_of_range_is_an_error_naming_the_range(tmp_path, device):
    with Region.open(_region(tmp_path)) as r:
        assert r.uuid(0) == "GPU-0"
        for read in (r.uuid, r.high_neighbours, r.used_bytes):
            with pytest.raises(RegionError, match=rf"device {device} out of range 0\.\.0"):
                read(device)


def _procs(tmp_path, slots):
    """A region whose first process slots are (pid, host_pid, pid_ns)."""
    region = _region(tmp_path)
    data = bytearray(region.read_bytes())
    s = RegionStruct.from_buffer(data)
    for i, (pid, host_pid, pid_ns) in enumerate(slots):
        s.procs[i].pid, s.procs[i].host_pid, s.procs[i].pid_ns = pid, host_pid, pid_ns
    del s
    region.write_bytes(bytes(data))
    return region


NS = 4026532001


def test_a_released_or_busy_slot_does_not_make_the_plugin_look_for_host_pids(tmp_path):
    # the limiter frees a slot by storing pid 0 and claims one through pid -1 (CARVE_SLOT_BUSY), leaving the
    # namespace of its last owner (native/src/region.c): neither is a process waiting for its host pid
    with Region.open(_procs(tmp_path, [(0, 0, NS), (-1, 0, NS)])) as r:
        assert not r.needs_host_pids()
        assert r.resolve_host_pids(known={(NS, 0): 7, (NS, -1): 8}) == 0
        assert r.processes() == []
    with Region.open(_procs(tmp_path, [(0, 0, NS), (12, 0, NS)])) as r:
        assert r.needs_host_pids()


def test_a_containers_first_process_waits_for_its_host_pid(tmp_path):
    # pid 1 in its own namespace: the container's entrypoint, most often the CUDA process itself
    with Region.open(_procs(tmp_path, [(1, 0, NS)])) as r:
        assert r.needs_host_pids()
        assert r.resolve_host_pids(known={(NS, 1): 4242}) == 1
        assert [(p.pid, p.host_pid) for p in r.processes()] == [(1, 4242)]
        assert not r.needs_host_pids()


def test_a_negative_host_pid_is_neither_waiting_nor_filled(tmp_path):
    # The limiter writes 0 (unknown) or a real pid; a negative one is what a tenant wrote into its own
    # region. Resolution fills only the 0s, so such a slot must not count as waiting either: if it did,
    # every enforcement pass would walk /proc for a slot it then leaves as it was.
    with Region.open(_procs(tmp_path, [(12, -1, NS), (13, -(2**31), NS)])) as r:
        assert not r.needs_host_pids()
        assert r.resolve_host_pids(known={(NS, 12): 1012, (NS, 13): 1013}) == 0
        assert [(p.pid, p.host_pid) for p in r.processes()] == [(12, -1), (13, -(2**31))]


def test_only_the_slots_without_a_host_pid_are_filled_and_counted(tmp_path):
    # slot 0 was resolved on an earlier pass (its host pid stays, whatever the scan says now); slot 1 is
    # new; slot 2 runs in the node's namespace (no pid_ns: the limiter wrote its host pid itself)
    region = _procs(tmp_path, [(5, 1005, NS), (6, 0, NS), (7, 0, 0)])
    with Region.open(region) as r:
        assert r.resolve_host_pids(known={(NS, 5): 2005, (NS, 6): 1006, (0, 7): 3007}) == 1
        assert [(p.pid, p.host_pid) for p in r.processes()] == [(5, 1005), (6, 1006), (7, 0)]
        assert not r.needs_host_pids()


@pytest.mark.parametrize("field", ["memory_bytes", "cores_percent"])
@pytest.mark.parametrize("value", [50.5, "50", None])
def test_a_device_limit_that_is_not_an_integer_is_refused_naming_the_field(tmp_path, field, value):
    fields = {"memory_bytes": 1 << 30, "cores_percent": 50, field: value}
    region = tmp_path / "region"
    with pytest.raises(LimitsError, match=rf"limits.devices\[0\].{field}: {value!r} is not an integer"):
        create_region(region, ClaimLimits((DeviceLimit(**fields),), str(region)))


@pytest.mark.parametrize("version", [LIMITS_VERSION - 1, LIMITS_VERSION + 1])
def test_a_limits_file_of_another_version_older_or_newer_is_refused_naming_it(tmp_path, version):
    # version 0 is no version the plugin ever wrote: the limiter (native/src/limits.c) refuses it too
    path = tmp_path / "limits" / "limits"
    write_limits(path, ClaimLimits((DeviceLimit(1 << 30, 50),), "/r"))
    data = bytearray(path.read_bytes())
    s = LimitsStruct.from_buffer(data)
    s.version = version
    del s
    path.write_bytes(bytes(data))
    with pytest.raises(RegionError, match=f"version is {version}, expected {LIMITS_VERSION}"):
        read_limits(path)
