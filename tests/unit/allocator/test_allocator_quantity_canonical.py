"""resource.Quantity as the API server reads and prints it (driver/allocator/quantity.py): the value a
string parses to, the string Kubernetes prints back, the refusals, and comparison and arithmetic by
value, which capacities, counters and CEL selectors all rely on."""

from __future__ import annotations

from fractions import Fraction

import pytest

from driver.allocator import quantity as q


@pytest.mark.parametrize(("text", "value", "printed"), [
    ("1Gi", 2**30, "1Gi"),
    ("1024Mi", 2**30, "1Gi"),
    ("1536Mi", 1536 * 2**20, "1536Mi"),
    ("0.5Gi", 2**29, "512Mi"),
    ("1.5Ki", 1536, "1536"),  # a binary quantity that is not a whole Ki prints in units
    ("0.5Ki", 512, "512"),  # under 1Ki: decimal
    ("1023Ki", 1023 * 1024, "1023Ki"),
    ("-1Ki", -1024, "-1Ki"),
    ("1Ti", 2**40, "1Ti"),  # every binary suffix by its own power of 1024
    ("1024Gi", 2**40, "1Ti"),
    ("3Pi", 3 * 2**50, "3Pi"),
    ("1024Ti", 2**50, "1Pi"),
    ("1536Ti", 1536 * 2**40, "1536Ti"),
    ("8Ei", 2**63, "8Ei"),
    ("1024Ei", 2**70, "1024Ei"),  # no suffix above Ei
    ("100m", Fraction(1, 10), "100m"),
    ("0.1", Fraction(1, 10), "100m"),
    (".5", Fraction(1, 2), "500m"),
    ("5.", 5, "5"),
    ("1000m", 1, "1"),
    ("1500", 1500, "1500"),
    ("1500k", 1_500_000, "1500k"),
    ("1000k", 10**6, "1M"),
    ("+2k", 2000, "2k"),
    ("-2k", -2000, "-2k"),
    ("0", 0, "0"),
    ("-0", 0, "0"),
    ("2E", 2 * 10**18, "2E"),
    ("1000E", 10**21, "1000E"),  # no suffix above E: the mantissa grows
    ("1n", Fraction(1, 10**9), "1n"),
    ("1u", Fraction(1, 10**6), "1u"),
    ("1001u", Fraction(1001, 10**6), "1001u"),
    ("0.5n", Fraction(1, 10**9), "1n"),  # finer than a nano unit: rounded up
    ("-0.5n", Fraction(-1, 10**9), "-1n"),  # away from zero
    ("1.0000000001", 1 + Fraction(1, 10**9), "1000000001n"),
    ("1e3", 1000, "1e3"),
    ("1.5e3", 1500, "1500"),
    ("1e-3", Fraction(1, 1000), "1e-3"),
    ("1E+2", 100, "100"),
    ("12e0", 12, "12"),
])
def test_a_quantity_parses_to_its_value_and_prints_as_kubernetes_prints_it(text, value, printed):
    got = q.parse(text)
    assert got.value == value
    assert str(got) == printed
    assert repr(got) == f"Quantity({printed!r})"
    assert q.is_quantity(text)


@pytest.mark.parametrize(("text", "why"), [
    ("", "is not a quantity (expected e.g."),
    ("Gi", "is not a quantity (expected e.g."),
    ("1.2.3", "unknown suffix '.3'"),
    ("1x", "unknown suffix 'x'"),
    ("1 Gi", "unknown suffix ' Gi'"),
    ("1gi", "unknown suffix 'gi'"),
    ("1e", "unknown suffix 'e'"),
    ("--1", "is not a quantity"),
])
def test_what_is_not_a_quantity_is_refused_saying_why(text, why):
    with pytest.raises(q.QuantityError, match=repr(text).replace(".", r"\.").replace("+", r"\+")) as e:
        q.parse(text)
    assert why in str(e.value)
    assert not q.is_quantity(text)


def test_a_non_string_is_no_quantity_text():
    with pytest.raises(q.QuantityError, match="quantity must be a string, not int"):
        q.parse(5)
    assert not q.is_quantity(5)
    assert not q.is_quantity(None)


@pytest.mark.parametrize(("raw", "printed"), [(5, "5"), (0, "0"), (-3, "-3"), (1.5, "1500m"), ("2Gi", "2Gi")])
def test_a_json_number_or_string_is_a_quantity_field(raw, printed):
    assert str(q.of(raw)) == printed


def test_a_boolean_is_not_a_quantity_field():
    with pytest.raises(q.QuantityError, match="True is not a quantity"):
        q.of(True)
    existing = q.parse("1Gi")
    assert q.of(existing) is existing


@pytest.mark.parametrize(("raw", "nanos"), [
    ("1Gi", 2**30 * 10**9), (1, 10**9), ("1n", 1), ("-2m", -2 * 10**6), (q.parse("3"), 3 * 10**9), (0, 0),
])
def test_units_are_whole_nano_units(raw, nanos):
    assert q.units(raw) == nanos


def test_nano_units_print_in_the_format_asked():
    assert str(q.from_units(1_500_000_000)) == "1500m"
    assert q.format_units(2**30 * 10**9, "BinarySI") == "1Gi"
    assert q.format_units(2**30 * 10**9) == "1073741824"
    assert q.format_units(10**12) == "1k"
    assert q.format_units(1) == "1n"


def test_comparison_is_by_value_never_by_format():
    one_k, thousand, kib = q.parse("1k"), q.parse("1000"), q.parse("1Ki")
    assert one_k == thousand and hash(one_k) == hash(thousand)
    assert one_k != kib and one_k != "1k" and one_k != 1000
    assert one_k < kib and not kib < one_k and not one_k < thousand
    assert one_k <= thousand and one_k <= kib and not kib <= one_k
    assert kib > one_k and not one_k > kib and not one_k > thousand
    assert one_k >= thousand and kib >= one_k and not one_k >= kib
    assert (one_k.cmp(kib), kib.cmp(one_k), one_k.cmp(thousand)) == (-1, 1, 0)


def test_arithmetic_is_exact_and_keeps_the_left_operands_format():
    total = q.parse("1Gi") + q.parse("512Mi")
    assert (total.value, str(total)) == (3 * 2**29, "1536Mi")
    left = q.parse("1Gi") - q.parse("1k")
    assert left.value == 2**30 - 1000 and left.format == "BinarySI"
    assert str(-q.parse("2Ki")) == "-2Ki"
    assert str(q.parse("100m") + q.parse("1")) == "1100m"


@pytest.mark.parametrize(("text", "integer", "ceil", "sign"), [
    ("1500m", False, 2, 1), ("-1500m", False, -1, -1), ("2", True, 2, 1), ("0", True, 0, 0),
    ("-1n", False, 0, -1), ("1n", False, 1, 1),
])
def test_integer_tests_rounding_and_sign(text, integer, ceil, sign):
    v = q.parse(text)
    assert (v.is_integer(), v.ceil_int(), v.sign()) == (integer, ceil, sign)
