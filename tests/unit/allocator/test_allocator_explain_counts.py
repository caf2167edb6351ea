"""The explanation of a claim that does not fit names DETAIL devices' reasons and counts the rest."""

import pytest
from allocator_fixtures import CLASSES, claim, dev, exactly, slice_

from driver.allocator import Unallocatable, allocate
from driver.allocator.explain import DETAIL


@pytest.mark.parametrize("devices", [DETAIL + 1, DETAIL + 4])
def test_devices_past_the_detail_are_counted_as_ruled_out(devices):
    shared = [dev(f"v{i}", "vgpu", memory="1Gi", multi=True) for i in range(devices)]
    too_big = claim("c", exactly("r", cls="vgpu", capacity={"memory": "2Gi"}))
    with pytest.raises(Unallocatable) as e:
        allocate(too_big, [slice_("s", shared)], CLASSES)
    assert f"; {devices - DETAIL} more ruled out" in str(e.value)
    assert str(e.value).count("memory 2Gi requested") == DETAIL
