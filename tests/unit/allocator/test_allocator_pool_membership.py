"""Which slices make a pool, whether the pool can be allocated from and why not, which nodes the allocator
tries, and which devices each node reaches in what order (driver/allocator/pools.py), as the allocator
(`carve allocate`, the controller) sees them."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, claim, dev, exactly, slice_

from driver.allocator.allocator import Allocator, Unallocatable, allocate

COUNTERS = [{"name": "gpu-0", "counters": {"slices": {"value": "7"}}}]


def names(alloc, node):
    return [(p.name, d.name) for p, d in alloc.node_devices(node)]


def test_only_the_newest_generation_of_a_pool_counts():
    slices = [slice_("old", [dev("g0")], generation=1), slice_("new-b", [dev("g2")], generation=3, count=2),
              slice_("new-a", [dev("g1")], generation=3, count=2), slice_("mid", [dev("g9")], generation=2)]
    alloc = Allocator(slices, CLASSES)
    (pool,) = alloc.pools
    assert pool.generation == 3
    assert [s.name for s in pool.slices] == ["new-a", "new-b"]  # sorted by name
    assert pool.usable and pool.problem() == ""
    assert names(alloc, "n1") == [("n1", "g1"), ("n1", "g2")]


def test_an_incomplete_pool_says_how_many_of_its_slices_it_has():
    alloc = Allocator([slice_("a", [dev("g0")], generation=2, count=3), slice_("b", [dev("g1")], generation=2,
                                                                              count=3)], CLASSES)
    (pool,) = alloc.pools
    assert not pool.usable
    assert pool.problem() == "pool gpu.carve.dev/n1 is incomplete: generation 2 has 2 of 3 slices"
    with pytest.raises(Unallocatable, match=r"all devices, but pool gpu\.carve\.dev/n1 is incomplete"):
        allocate(claim("c", exactly("r", mode="All")), [slice_("a", [dev("g0")], count=2)], CLASSES)


def test_slices_that_disagree_on_the_pools_size_leave_it_incomplete():
    alloc = Allocator([slice_("a", [dev("g0")], count=2), slice_("b", [dev("g1")], count=1)], CLASSES)
    assert not alloc.pools[0].complete


def test_a_pool_whose_slices_publish_one_counter_set_twice_is_invalid():
    slices = [slice_("a", [dev("g0")], count=2, counters=COUNTERS),
              slice_("b", [dev("g1")], count=2, counters=COUNTERS)]
    (pool,) = Allocator(slices, CLASSES).pools
    assert pool.invalid == "duplicate counter set name gpu-0"
    assert pool.problem() == "pool gpu.carve.dev/n1 is invalid: duplicate counter set name gpu-0"
    with pytest.raises(Unallocatable, match="duplicate counter set name gpu-0"):
        allocate(claim("c", exactly("r")), slices, CLASSES)
    other = [{"name": "gpu-1", "counters": {"slices": {"value": "7"}}}]
    fine = [slice_("a", [dev("g0")], count=2, counters=COUNTERS),
            slice_("b", [dev("g1")], count=2, counters=other)]
    (pool,) = Allocator(fine, CLASSES).pools
    assert pool.usable and sorted(pool.counter_sets) == ["gpu-0", "gpu-1"]


def test_pools_are_ordered_by_driver_then_name_and_kept_apart():
    slices = [slice_("z", [dev("g0")], pool="zeta"), slice_("a", [dev("g0")], pool="alpha"),
              slice_("o", [dev("g0")], pool="alpha", driver="a.other.dev")]
    alloc = Allocator(slices, CLASSES)
    assert [p.key for p in alloc.pools] == [("a.other.dev", "alpha"), ("gpu.carve.dev", "alpha"),
                                            ("gpu.carve.dev", "zeta")]
    assert all(p.usable for p in alloc.pools)  # the same device name in other pools is no duplicate


def _selector(op, *values, key="metadata.name"):
    return {"nodeSelectorTerms": [{"matchFields": [{"key": key, "operator": op, "values": list(values)}]}]}


def test_the_nodes_tried_are_those_slices_devices_and_selectors_name():
    per_device = slice_("p", [dict(dev("d0"), nodeName="n4"),
                              dict(dev("d1"), nodeSelector=_selector("In", "n5")),
                              dict(dev("d2"), allNodes=True)], node=None, pool="pd")
    per_device["spec"].pop("allNodes")
    per_device["spec"]["perDeviceNodeSelection"] = True
    sel = slice_("s", [dev("g1")], node=None, pool="sel")
    sel["spec"].pop("allNodes")
    sel["spec"]["nodeSelector"] = _selector("In", "n3", "n2")
    ignored = slice_("i", [dev("g2")], node=None, pool="ign")
    ignored["spec"].pop("allNodes")
    ignored["spec"]["nodeSelector"] = _selector("NotIn", "n7")
    alloc = Allocator([slice_("a", [dev("g0")], node="n1"), sel, per_device, ignored], CLASSES)
    assert alloc.nodes == ["n1", "n2", "n3", "n4", "n5"]


def test_each_node_reaches_its_own_devices_and_the_roaming_ones_in_pool_order():
    everywhere = slice_("e", [dev("e0")], node=None, pool="b-all")
    named = slice_("s", [dev("s0")], node=None, pool="c-sel")
    named["spec"].pop("allNodes")
    named["spec"]["nodeSelector"] = _selector("In", "n2")
    alloc = Allocator([slice_("x", [dev("x0"), dev("x1")], node="n1", pool="a-n1"), everywhere, named,
                       slice_("y", [dev("y0")], node="n2", pool="d-n2")], CLASSES)
    assert names(alloc, "n1") == [("a-n1", "x0"), ("a-n1", "x1"), ("b-all", "e0")]
    assert names(alloc, "n2") == [("b-all", "e0"), ("c-sel", "s0"), ("d-n2", "y0")]
    assert names(alloc, "n9") == [("b-all", "e0")]
    assert names(alloc, None) == [("b-all", "e0")]
    only_local = Allocator([slice_("x", [dev("x0")], node="n1")], CLASSES)
    assert names(only_local, "n1") == [("n1", "x0")]
    assert names(only_local, "n2") == []


def test_a_slice_without_a_generation_is_generation_0_as_the_api_decodes_it():
    unset = slice_("a", [dev("g0")])
    del unset["spec"]["pool"]["generation"]
    alloc = Allocator([unset, slice_("b", [dev("g1")], generation=1)], CLASSES)
    (pool,) = alloc.pools
    assert (pool.generation, [s.name for s in pool.slices]) == (1, ["b"])
    (alone,) = Allocator([unset], CLASSES).pools
    assert alone.generation == 0 and alone.usable
