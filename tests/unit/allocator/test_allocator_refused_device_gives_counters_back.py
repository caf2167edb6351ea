"""A device the search counts and then refuses (a taint the claim does not tolerate, found after its
shared counters were added) gives those counters back before the next candidate is tried: otherwise a
partitionable device of the same GPU that fits alone is refused for counters nothing holds."""

from __future__ import annotations

from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, slice_

from driver.allocator import allocate

COUNTERS = [{"name": "gpu-0", "counters": {"slices": {"value": "4"}}}]
TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def _mig(name: str, taints: list | None = None) -> dict:
    # each takes 3 of gpu-0's 4 slices: the two never fit together
    return dev(
        name, "mig", consumes=[{"counterSet": "gpu-0", "counters": {"slices": {"value": "3"}}}], taints=taints
    )


def test_a_tainted_device_tried_first_leaves_its_counters_for_the_next():
    slices = [slice_("a", [_mig("m0", taints=[TAINT]), _mig("m1")], counters=COUNTERS)]
    out = allocate(claim("c", exactly("r", cls="mig")), slices, CLASSES)
    assert devices_of(out) == [("r", "n1", "m1")]
