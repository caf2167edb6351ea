"""Two requests that differ only in name may share the search's symmetry cut (the second starts where the
first's picks started); requests that differ in anything a device check reads must not, or a claim that
fits is refused. Each case is a claim whose second request needs a device before the first's pick."""

from __future__ import annotations

from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, slice_

from driver.allocator.allocator import Allocator

TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}
TOLERATE = [{"key": "k", "operator": "Exists"}]


def both_ways(slices, c, allocated=()):
    out = []
    for prune in (True, False):
        a = Allocator(slices, CLASSES)
        for held in allocated:
            a.add_allocated(held)
        out.append(devices_of(a.allocate(c, prune=prune)))
    assert out[0] == out[1]
    return out[0]


def test_requests_that_differ_in_tolerations_are_not_twins():
    slices = [slice_("a", [dev("g0", taints=[TAINT]), dev("g1")])]
    c = claim("c", exactly("r1"), exactly("r2", tolerations=TOLERATE))
    assert both_ways(slices, c) == [("r1", "n1", "g1"), ("r2", "n1", "g0")]


def test_requests_that_differ_in_capacity_are_not_twins():
    slices = [slice_("a", [dev("g0", memory="4Gi", multi=True), dev("g1", memory="8Gi", multi=True)])]
    c = claim("c", exactly("r1", capacity={"memory": "8Gi"}), exactly("r2", capacity={"memory": "4Gi"}))
    assert both_ways(slices, c) == [("r1", "n1", "g1"), ("r2", "n1", "g0")]


def test_requests_that_differ_in_admin_access_are_not_twins():
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    held = claim("held", exactly("r"), uid="u0")
    held["status"] = {"allocation": {"devices": {"results": [
        {"request": "r", "driver": "gpu.carve.dev", "pool": "n1", "device": "g0"}], "config": []}}}
    c = claim("c", exactly("r1"), exactly("r2", admin=True), uid="u1")
    assert both_ways(slices, c, [held]) == [("r1", "n1", "g1"), ("r2", "n1", "g0")]


def test_a_constraint_that_names_one_of_two_alike_requests_keeps_them_apart():
    slices = [slice_("a", [dev("g0", rack="r1"), dev("g1", rack="r2"), dev("g2", rack="r2")])]
    # r0 and r1 share a rack: only g1 and g2 do, so r2 (unconstrained) must take g0, before r1's pick
    c = claim("c", exactly("r0"), exactly("r1"), exactly("r2"),
              constraints=[{"matchAttribute": "gpu.carve.dev/rack", "requests": ["r0", "r1"]}])
    assert both_ways(slices, c) == [("r0", "n1", "g1"), ("r1", "n1", "g2"), ("r2", "n1", "g0")]
