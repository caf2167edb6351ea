"""The search at its edges, as a claim's author sees it: a matchAttribute or distinctAttribute device lacking
the attribute, allocationMode All over devices a selector cannot judge or that are full, two admin requests
on one device, and the API's 32-result limit."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, devices_of, exactly, slice_

from driver.allocator.allocator import Allocator, Unallocatable, allocate


def picked(allocation):
    return [d for _, _, d in devices_of(allocation)]


def test_match_attribute_passes_over_a_device_without_the_attribute():
    slices = [slice_("a", [dev("g0"), dev("g1", rack="r1"), dev("g2", rack="r1")])]
    c = claim("c", exactly("r", count=2), constraints=[{"matchAttribute": f"{DRIVER}/rack"}])
    assert picked(allocate(c, slices, CLASSES)) == ["g1", "g2"]
    lacking = [slice_("a", [dev("g0"), dev("g1"), dev("g2", rack="r1")])]
    with pytest.raises(Unallocatable):
        allocate(c, lacking, CLASSES)


def test_match_attribute_compares_the_typed_value():
    # an int 1 and a string "1" are different values to matchAttribute
    slices = [slice_("a", [dev("g0", rack=1), dev("g1", rack="1"), dev("g2", rack=1)])]
    c = claim("c", exactly("r", count=2), constraints=[{"matchAttribute": f"{DRIVER}/rack"}])
    assert picked(allocate(c, slices, CLASSES)) == ["g0", "g2"]


def test_distinct_attribute_passes_over_repeats_and_devices_without_it():
    slices = [slice_("a", [dev("g0", rack="r1"), dev("g1", rack="r1"), dev("g2"), dev("g3", rack="r2")])]
    c = claim("c", exactly("r", count=2), constraints=[{"distinctAttribute": f"{DRIVER}/rack"}])
    assert picked(allocate(c, slices, CLASSES)) == ["g0", "g3"]
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r", count=3), constraints=[{"distinctAttribute": f"{DRIVER}/rack"}]),
                 slices, CLASSES)


def test_a_constraint_applies_only_to_the_requests_it_names():
    slices = [slice_("a", [dev("g0", rack="r1"), dev("g1", rack="r1"), dev("g2", rack="r2")])]
    c = claim("c", exactly("a"), exactly("b"), exactly("x"),
              constraints=[{"distinctAttribute": f"{DRIVER}/rack", "requests": ["a", "b"]}])
    assert devices_of(allocate(c, slices, CLASSES)) == [("a", "n1", "g0"), ("b", "n1", "g2"),
                                                        ("x", "n1", "g1")]
    every = claim("c", exactly("a"), exactly("b"), exactly("x"),
                  constraints=[{"distinctAttribute": f"{DRIVER}/rack"}])
    with pytest.raises(Unallocatable):
        allocate(every, slices, CLASSES)  # three requests, two racks


def test_all_devices_fails_with_the_selector_error_of_any_device():
    slices = [slice_("a", [dev("g0", rack="r1"), dev("g1")])]
    c = claim("c", exactly("r", mode="All", selectors=[f'device.attributes["{DRIVER}"].rack == "r1"']))
    with pytest.raises(Unallocatable, match="no such key"):
        allocate(c, slices, CLASSES)


def test_all_devices_leaves_out_a_shared_device_whose_capacity_others_hold():
    slices = [slice_("a", [dev("g0", memory="10Gi", multi=True), dev("g1", memory="10Gi", multi=True)])]
    alloc = Allocator(slices, CLASSES)
    first = claim("first", exactly("r", capacity={"memory": "8Gi"}), uid="u1")
    allocation = alloc.allocate(first)
    assert picked(allocation) == ["g0"]
    alloc.add_allocated({**first, "status": {"allocation": allocation}})
    every = claim("every", exactly("r", mode="All", capacity={"memory": "4Gi"}), uid="u2")
    assert picked(alloc.allocate(every)) == ["g1"]


def test_all_devices_fails_when_one_of_them_is_taken_by_an_earlier_request_of_the_claim():
    # the list is fixed before the search: a device the first request took stays on it and fails it
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    c = claim("c", exactly("one"), exactly("every", mode="All"))
    with pytest.raises(Unallocatable):
        allocate(c, slices, CLASSES)
    assert picked(allocate(claim("c", exactly("every", mode="All")), slices, CLASSES)) == ["g0", "g1"]


def test_two_admin_requests_of_one_claim_take_two_devices():
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    c = claim("c", exactly("a", admin=True), exactly("b", admin=True))
    assert devices_of(allocate(c, slices, CLASSES)) == [("a", "n1", "g0"), ("b", "n1", "g1")]
    with pytest.raises(Unallocatable):
        allocate(c, [slice_("a", [dev("g0")])], CLASSES)


def test_an_admin_request_may_take_a_device_another_claim_holds():
    slices = [slice_("a", [dev("g0")])]
    alloc = Allocator(slices, CLASSES)
    user = claim("user", exactly("r"), uid="u1")
    allocation = alloc.allocate(user)
    alloc.add_allocated({**user, "status": {"allocation": allocation}})
    with pytest.raises(Unallocatable):
        alloc.allocate(claim("other", exactly("r"), uid="u3"))
    assert picked(alloc.allocate(claim("admin", exactly("r", admin=True), uid="u2"))) == ["g0"]


def test_a_claim_gets_at_most_32_results():
    slices = [slice_("a", [dev(f"g{i:02}") for i in range(40)])]
    assert len(picked(allocate(claim("c", exactly("r", count=32)), slices, CLASSES))) == 32
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r", count=20), exactly("s", count=13)), slices, CLASSES)
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r", count=32), exactly("s", mode="All")), slices, CLASSES)


def test_requests_after_an_all_devices_request_are_still_allocated():
    slices = [slice_("a", [dev("g0"), dev("g1"), dev("v0", "vgpu")])]
    c = claim("c", exactly("every", mode="All"), exactly("one", cls="vgpu"))
    assert devices_of(allocate(c, slices, CLASSES)) == [
        ("every", "n1", "g0"), ("every", "n1", "g1"), ("one", "n1", "v0")]
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("every", mode="All"), exactly("m", cls="mig")), slices, CLASSES)
