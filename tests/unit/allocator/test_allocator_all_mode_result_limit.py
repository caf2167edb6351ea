"""allocationMode All against the API's 32-result limit: all of 32 devices is allocated, all of 33 is not (a
claim's status holds at most 32 results), with or without an earlier request in the claim."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, claim, dev, exactly, slice_

from driver.allocator.allocator import Unallocatable, allocate


def _gpus(n):
    return [slice_("a", [dev(f"g{i:02}") for i in range(n)] + [dev("v0", "vgpu")])]


def test_all_of_32_devices_is_allocated_and_all_of_33_is_not():
    assert len(allocate(claim("c", exactly("r", mode="All")), _gpus(32), CLASSES)["devices"]["results"]) == 32
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r", mode="All")), _gpus(33), CLASSES)


def test_an_earlier_request_counts_towards_the_limit():
    c = claim("c", exactly("one", cls="vgpu"), exactly("every", mode="All"))
    assert len(allocate(c, _gpus(31), CLASSES)["devices"]["results"]) == 32
    with pytest.raises(Unallocatable):
        allocate(c, _gpus(32), CLASSES)
