"""A region's fields read back as what they are when a tenant (who can write its own region) puts values
there the plugin never writes: a policy or priority past its table, a device index out of range (survivors
of generated mutants in driver/limits/region.py)."""

from __future__ import annotations

import pytest

from driver.limits import ClaimLimits, DeviceLimit, create_region
from driver.limits.env import CORE_POLICIES, PRIORITIES
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

