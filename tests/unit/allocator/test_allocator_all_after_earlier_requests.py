"""allocationMode All after an earlier request of the same claim: the scheduler fixes All's list of devices
before the search, so a device the earlier request took stays on it and then fails All; an admin request
(adminAccess, which may share a device with other claims) does not get a device twice within its own
claim either, unless the device allows multiple allocations."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, slice_

from driver.allocator.allocator import Unallocatable, allocate


@pytest.mark.parametrize("admin", [False, True], ids=["user", "admin"])
def test_all_fails_when_an_earlier_request_of_the_claim_took_one_of_its_devices(admin):
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    c = claim("c", exactly("one", admin=admin), exactly("every", mode="All", admin=admin))
    with pytest.raises(Unallocatable):
        allocate(c, slices, CLASSES)
    # the same requests over devices apart: All takes every device of its class
    apart = [slice_("a", [dev("g0"), dev("v0", type_="vgpu")])]
    c = claim("c", exactly("one", cls="vgpu", admin=admin), exactly("every", mode="All", admin=admin))
    assert devices_of(allocate(c, apart, CLASSES)) == [("one", "n1", "v0"), ("every", "n1", "g0")]


def test_an_admin_all_may_take_again_a_device_that_allows_multiple_allocations():
    slices = [slice_("a", [dev("g0", multi=True), dev("g1", multi=True)])]
    c = claim("c", exactly("one", admin=True), exactly("every", mode="All", admin=True))
    assert devices_of(allocate(c, slices, CLASSES)) == [("one", "n1", "g0"), ("every", "n1", "g0"),
                                                        ("every", "n1", "g1")]
