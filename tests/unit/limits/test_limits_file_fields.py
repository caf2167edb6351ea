"""The limits file's fields are checked against their ranges when read: the device count up to
CARVE_MAX_DEVICES inclusive, each policy below its table's length (survivors of generated mutants)."""

from __future__ import annotations

import ctypes

import pytest

from driver.limits import ClaimLimits, DeviceLimit, write_limits
from driver.limits.env import MAX_DEVICES
from driver.limits.limitsfile import OOM_POLICIES, LimitsStruct, read_limits
from driver.limits.region import RegionError


def _written(tmp_path, **fields):
    path = tmp_path / "limits" / "limits"
    write_limits(path, ClaimLimits((DeviceLimit(1 << 30, 50, uuid="GPU-A"),), "/r"))
    s = LimitsStruct.from_buffer_copy(path.read_bytes())
    for name, value in fields.items():
        setattr(s, name, value)
    path.chmod(0o600)
    path.write_bytes(bytes(s))
    return path


def test_sixteen_devices_are_read_and_seventeen_are_refused(tmp_path):
    assert len(read_limits(_written(tmp_path, device_count=MAX_DEVICES)).memory_limits) == MAX_DEVICES
    with pytest.raises(RegionError, match=f"device_count is {MAX_DEVICES + 1}"):
        read_limits(_written(tmp_path, device_count=MAX_DEVICES + 1))
    with pytest.raises(RegionError, match="device_count is 0"):
        read_limits(_written(tmp_path, device_count=0))


@pytest.mark.parametrize("field", ["oom_policy", "core_policy", "priority"])
def test_a_policy_one_past_its_table_is_refused(tmp_path, field):
    from driver.limits.limitsfile import CORE_POLICIES, PRIORITIES

    table = {"oom_policy": OOM_POLICIES, "core_policy": CORE_POLICIES, "priority": PRIORITIES}[field]
    read_limits(_written(tmp_path, **{field: len(table) - 1}))  # the last one is valid
    for past in (len(table), len(table) + 7):
        with pytest.raises(RegionError, match="a policy is out of range"):
            read_limits(_written(tmp_path, **{field: past}))


def test_the_struct_is_the_size_the_reader_expects():
    from driver.limits.limitsfile import LIMITS_SIZE

    assert ctypes.sizeof(LimitsStruct) == LIMITS_SIZE
