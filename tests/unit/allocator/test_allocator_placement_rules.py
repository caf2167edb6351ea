"""The placement policy's rules in detail (driver/allocator/placement.py): which config entry decides, how
full a GPU reads, and the order binpack and spread give, ties included."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from driver.allocator import placement as pl
from driver.allocator.model import CapacitySpec
from driver.names import DRIVER_NAME


def entry(value, requests=None, driver=DRIVER_NAME, kind="SliceConfig"):
    e = {"opaque": {"driver": driver, "parameters": {"kind": kind, "placement": value}}}
    if requests is not None:
        e["requests"] = requests
    return json.loads(json.dumps(e))


@pytest.mark.parametrize(("cls", "claim", "want"), [
    ([entry("spread"), entry("binpack")], [], "binpack"),  # the last class entry that sets one
    ([entry("binpack"), entry("nonsense")], [], "binpack"),  # an invalid value counts as unset
    ([entry("binpack"), entry("spread", driver="other.dev")], [], "binpack"),
    ([entry("binpack"), entry("spread", kind="Other")], [], "binpack"),
    ([], [entry("spread"), entry("binpack", requests=["other"])], "spread"),  # not for this request
    ([], [entry("spread", requests=["r"]), entry("binpack", requests=["x", "r"])], "binpack"),
    ([], [entry("binpack"), entry("spread", requests=[])], "spread"),  # an empty list applies to all
    ([entry("spread")], [entry("binpack")], "spread"),  # the class's word wins
    ([{"opaque": "x"}, {"other": 1}, "junk"], [{"opaque": {"driver": DRIVER_NAME, "parameters": "x"}}], None),
    ([], [], None),
])
def test_which_entry_decides_the_placement(cls, claim, want):
    assert pl.placement_for("r", cls, claim) == want


@pytest.mark.parametrize(("held", "capacity", "fraction"), [
    ({"memory": 3}, {"memory": CapacitySpec(12)}, Fraction(1, 4)),
    (None, {"memory": CapacitySpec(12)}, Fraction(0)),
    ({"cores": 5}, {"memory": CapacitySpec(12)}, Fraction(0)),
    ({"memory": 3}, {"memory": 6}, Fraction(1, 2)),  # a raw number as total
    ({"memory": 3}, {"memory": CapacitySpec(0)}, Fraction(0)),  # no memory to fill
    ({"memory": 3}, {}, Fraction(0)),
])
def test_how_full_a_gpu_reads(held, capacity, fraction):
    assert pl.used_fraction(held, capacity) == fraction


def test_binpack_and_spread_order_only_the_shareable_candidates_ties_in_device_order():
    loads = {"a": Fraction(1, 2), "b": None, "c": Fraction(0), "d": Fraction(1, 2), "e": Fraction(3, 4),
             "f": None}
    cands = list("abcdef")
    assert pl.reorder(cands, "binpack", loads.get) == ["e", "b", "a", "d", "c", "f"]
    assert pl.reorder(cands, "spread", loads.get) == ["c", "b", "a", "d", "e", "f"]
    assert pl.reorder(cands, None, loads.get) == cands
    assert pl.reorder(cands, "first", loads.get) == cands
