"""A request with more usable devices than it needs is not what keeps a claim out: the explanation gives
it its counts only, and the usable count and device reasons only for the request that falls short."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, claim, dev, exactly, slice_

from driver.allocator.allocator import Unallocatable, allocate


@pytest.mark.parametrize("spare", [1, 2], ids=["one-spare", "two-spare"])
def test_a_request_with_devices_to_spare_gets_no_usable_count(spare):
    gpus = [dev(f"g{i}") for i in range(1 + spare)]
    c = claim("c", exactly("a"), exactly("b", cls="vgpu", count=3))
    with pytest.raises(Unallocatable) as refused:
        allocate(c, [slice_("a", [*gpus, dev("v0", "vgpu")])], CLASSES)
    assert refused.value.reason == (
        f"claim default/c does not fit on node n1: request a needs 1 device: {1 + spare} of {2 + spare} "
        f"devices match class gpu; request b needs 3 devices: 1 of {2 + spare} devices match class vgpu; "
        "1 usable")
