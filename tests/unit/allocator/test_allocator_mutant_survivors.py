"""Survivors of generated mutants (docs/testing.md, "Generated mutants") in the allocator, killed here: the
CEL cost estimate of literals and lists, a version's build metadata written back, and asInteger's range."""

from __future__ import annotations

import pytest
from celpy import celtypes

from driver.allocator import cel, cel_cost, semver


def _cost(expr: str) -> int:
    cel.compile_selector("true")  # sets up the parser
    return cel_cost.estimate(cel.cel_ast.reduce(cel._PARSER.parse(expr))).cost


def test_a_list_literal_costs_one_plus_its_items():
    # the estimate adds: each item's cost counts once, on top of the list's own step (items of odd and
    # even cost, so that no other arithmetic gives the same figures)
    for item in ("1", 'device.attributes["gpu.carve.dev"].name.matches("^a+$")', 'device.driver == "x"'):
        assert _cost(f"[{item}]") == 1 + _cost(item), item
        assert _cost(f"[{item}, {item}, {item}]") == 1 + 3 * _cost(item), item
    assert _cost("[1, 1, 1, 1, 1]") == 6
    assert _cost("[]") == 1


def test_a_version_with_build_metadata_prints_as_it_was_written():
    for text in ("1.2.3+build.5", "1.2.3-rc.1+exp.sha.5114f85", "10.0.1"):
        assert str(semver.parse(text)) == text


@pytest.mark.parametrize("value", ["1500m", "20Ei", "-20Ei"])
def test_as_integer_of_a_fraction_or_past_int64_is_a_runtime_error(value):
    # either reason alone refuses the conversion (the Kubernetes quantity library's asInteger)
    with pytest.raises(cel.CelError, match=f"cannot convert value {value} to an integer"):
        cel.evaluate(f'quantity("{value}").asInteger() != 0', celtypes.MapType({}))
