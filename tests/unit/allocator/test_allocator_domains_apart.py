"""Names of other domains stay apart from the driver's: matchAttribute on `vendor.example/rack` does not
take a device's bare `rack` (the driver's), and a selector reading the driver's whole attribute or capacity
map is one input for devices that differ only in another domain's names or in a capacity's request policy
(the cache evaluates it once for them)."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, devices_of, exactly, slice_
from support.decoded import read_slice

from driver.allocator.allocator import Unallocatable, allocate
from driver.allocator.cel_cache import SelectorCache


@pytest.mark.parametrize("domain", ["a.example", "vendor.example"], ids=["before", "after"])
def test_match_attribute_on_another_domain_does_not_take_the_drivers_bare_name(domain):
    c = claim("c", exactly("r", count=2), constraints=[{"matchAttribute": f"{domain}/rack"}])
    with pytest.raises(Unallocatable):
        allocate(c, [slice_("a", [dev("g0", rack="r1"), dev("g1", rack="r1")])], CLASSES)
    theirs = [slice_("a", [dev("g0", **{f"{domain}/rack": "r1"}), dev("g1", **{f"{domain}/rack": "r1"})])]
    assert devices_of(allocate(c, theirs, CLASSES)) == [("r", "n1", "g0"), ("r", "n1", "g1")]


def _devices(*raws):
    return read_slice({"metadata": {"name": "s"}, "spec": {
        "driver": DRIVER, "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": [dict(r, name=f"d{i}") for i, r in enumerate(raws)]}}).devices


@pytest.mark.parametrize(("expression", "raws"), [
    (f'size(device.attributes["{DRIVER}"]) == 1',
     [{"attributes": {"x": {"int": 1}, "a.example/y": {"int": 1}}},
      {"attributes": {"x": {"int": 1}, "a.example/y": {"int": 2}}},
      {"attributes": {"x": {"int": 1}}}]),
    (f'size(device.capacity["{DRIVER}"]) == 1',
     [{"capacity": {"m": {"value": "1Gi"}}},
      {"capacity": {"m": {"value": "1Gi", "requestPolicy": {"default": "1Mi"}}}},
      {"capacity": {"m": {"value": "1Gi"}, "a.example/n": {"value": "1"}}}]),
])
def test_a_whole_domain_read_is_one_input_for_devices_alike_in_that_domain(expression, raws):
    cache = SelectorCache()
    assert [cache.matches(expression, d) for d in _devices(*raws)] == [True, True, True]
    assert cache.evaluations == 1
