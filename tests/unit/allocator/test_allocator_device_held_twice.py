"""One exclusive device recorded in two allocated claims (a double allocation the API server let through a
race, or a status written by hand): the device and the counters it consumes stay held until the last of
those claims is gone, and are counted once, so that they are all free again after both."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, devices_of, exactly, slice_

from driver.allocator.allocator import Allocator, Unallocatable

COUNTERS = [{"name": "gpu-0", "counters": {"slices": {"value": "4"}}}]


def _mig(name, value):
    return dev(name, "mig", consumes=[{"counterSet": "gpu-0", "counters": {"slices": {"value": value}}}])


def _holding(name, uid, device):
    return {**claim(name, exactly("r", cls="mig"), uid=uid), "status": {"allocation": {"devices": {
        "results": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": device}], "config": []}}}}


def _asking(name, device):
    named = f'device.attributes["{DRIVER}"].uuid == "{device}"'
    return claim(name, exactly("r", cls="mig", selectors=[named]), uid=f"uid-{name}")


@pytest.mark.parametrize("first_gone", ["u1", "u2"])
def test_a_device_two_claims_hold_stays_in_use_until_both_are_gone(first_gone):
    # m0 takes 3 of gpu-0's 4 slices, x0 all 4, y0 one: x0 fits only while nothing holds m0, y0 beside m0
    a = Allocator([slice_("a", [_mig("m0", "3"), _mig("x0", "4"), _mig("y0", "1")], counters=COUNTERS)],
                  CLASSES)
    a.add_allocated(_holding("h1", "u1", "m0"))
    a.add_allocated(_holding("h2", "u2", "m0"))
    assert devices_of(a.allocate(_asking("beside", "y0"))) == [("r", "n1", "y0")]  # m0 counted once
    a.remove_allocated(first_gone)
    for device in ("m0", "x0"):
        with pytest.raises(Unallocatable):
            a.allocate(_asking("again", device))
    a.remove_allocated({"u1": "u2", "u2": "u1"}[first_gone])
    assert devices_of(a.allocate(_asking("whole", "x0"))) == [("r", "n1", "x0")]
    assert devices_of(a.allocate(_asking("part", "m0"))) == [("r", "n1", "m0")]


def test_a_claim_recorded_again_on_the_same_device_does_not_hold_it_twice():
    a = Allocator([slice_("a", [_mig("m0", "3"), _mig("x0", "4")], counters=COUNTERS)], CLASSES)
    a.add_allocated(_holding("h1", "u1", "m0"))
    a.add_allocated(_holding("h1", "u1", "m0"))  # the same claim's update
    a.remove_allocated("u1")
    assert devices_of(a.allocate(_asking("whole", "x0"))) == [("r", "n1", "x0")]
