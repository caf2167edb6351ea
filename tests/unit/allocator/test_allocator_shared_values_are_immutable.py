"""Quantities and semantic versions are values shared between reads: `quantity.parse` is cached, so every
read of the same text ("1Gi" in each of a thousand slices) returns the same Quantity object, and a
selector's `quantity("...")` and `semver("...")` literals are folded once into the compiled selector
that every device's evaluation reuses (cel_fast.py). So neither can be changed in place: one caller's
change would become every later read of that text, in other slices, claims and selectors."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from driver.allocator import quantity, semver


def test_a_parsed_quantity_cannot_be_changed_and_the_next_parse_is_the_same():
    first = quantity.parse("1Gi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.value = Fraction(1)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.format = "DecimalSI"  # type: ignore[misc]
    again = quantity.parse("1Gi")
    assert again.value == 2**30 and again.format == "BinarySI"
    assert quantity.canonical(again) == "1Gi"


def test_a_semantic_version_cannot_be_changed():
    version = semver.parse("1.2.3-rc.1")
    for field, value in (("major", 9), ("pre", ()), ("text", "9.0.0")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(version, field, value)
    assert (version.major, version.minor, version.patch, version.pre) == (1, 2, 3, ("rc", "1"))
    assert version < semver.parse("1.2.3")
