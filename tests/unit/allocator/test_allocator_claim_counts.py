"""What the allocator counts, exactly (`carve simulate` and the throughput benchmark print them): claims
allocated and refused, and devices tried by the search, from zero; and a capacity request of zero, the
least a claim may ask of a shared device (only a negative one is refused, as the API server refuses it)."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, claim, dev, exactly, slice_

from driver.allocator.allocator import Allocator, Unallocatable

COUNTS = ("claims_allocated", "claims_unallocatable", "search_steps", "searches_skipped")


def counts(a):
    return {k: a.stats[k] for k in COUNTS}


def test_claims_and_devices_tried_are_counted_from_zero():
    a = Allocator([slice_("s", [dev("g0"), dev("g1")])], CLASSES)
    assert counts(a) == dict.fromkeys(COUNTS, 0)
    a.allocate(claim("one", exactly("r")))
    assert counts(a) == {"claims_allocated": 1, "claims_unallocatable": 0, "search_steps": 1,
                         "searches_skipped": 0}
    a.allocate(claim("two", exactly("r", count=2)))  # g0 then g1 tried
    assert counts(a)["search_steps"] == 3
    with pytest.raises(Unallocatable):
        a.allocate(claim("three", exactly("r", count=3)))
    assert counts(a) == {"claims_allocated": 2, "claims_unallocatable": 1, "search_steps": 3,
                         "searches_skipped": 0}


def test_a_capacity_request_of_zero_is_allocated_and_a_negative_one_refused():
    a = Allocator([slice_("s", [dev("g0", multi=True, memory="10Gi")])], CLASSES)
    results = a.allocate(claim("zero", exactly("r", capacity={"memory": "0"})))["devices"]["results"]
    assert [(r["device"], r["consumedCapacity"]) for r in results] == [("g0", {"memory": "0"})]
    with pytest.raises(Unallocatable, match=r"request r: capacity.requests.memory: '-1' is negative"):
        a.allocate(claim("minus", exactly("r", capacity={"memory": "-1"})))
