"""Kubernetes resource.Quantity in Python: parsing, exact arithmetic, comparison, canonical form.

The allocator compares capacities, counters and capacity requests, and CEL selectors call the
quantity library; all of them must agree with the API server to the last byte. Values are kept
as exact fractions (never floats). As in Kubernetes, anything finer than a nano unit is rounded
up to the next nano unit, and a quantity remembers the format it was written in (binary suffix,
decimal suffix, or decimal exponent) so that it prints back the way Kubernetes would.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exp: suffix for suffix, exp in _DECIMAL.items()}
# <sign><digits with at most one dot, at least one digit><suffix>; the suffix is checked below.
_SYNTAX = re.compile(r"^([+-]?)([0-9]+\.?[0-9]*|\.[0-9]+)(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")
_NANO = Fraction(1, 10**9)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact quantity; equality and ordering compare values, never formats."""

    value: Fraction
    format: Format = "DecimalSI"

    # Ordering and equality by value, like resource.Quantity.Cmp.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        return self.value <= other.value

    def __gt__(self, other: Quantity) -> bool:
        return self.value > other.value

    def __ge__(self, other: Quantity) -> bool:
        return self.value >= other.value

    def cmp(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.format)

    def __neg__(self) -> Quantity:
        return Quantity(-self.value, self.format)

    def is_integer(self) -> bool:
        return self.value.denominator == 1

    def ceil_int(self) -> int:
        """resource.Quantity.Value(): the value rounded up to an integer."""
        return math.ceil(self.value)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def __str__(self) -> str:
        return canonical(self)

    def __repr__(self) -> str:
        return f"Quantity({canonical(self)!r})"


def _round_nano(value: Fraction) -> Fraction:
    """Round away from zero to a whole number of nano units, as Kubernetes does on parse."""
    if (value / _NANO).denominator == 1:
        return value
    nanos = math.ceil(abs(value) / _NANO)
    return Fraction(nanos if value >= 0 else -nanos, 10**9)


@functools.lru_cache(maxsize=8192)
def parse(text: str) -> Quantity:
    """Parse "1Gi", "500m", "1.5e3", "+2k"... exactly like resource.ParseQuantity."""
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string, not {type(text).__name__}")
    m = _SYNTAX.match(text)
    if not m:
        raise QuantityError(f"{text!r} is not a quantity (expected e.g. 4Gi, 500m, 1.5e3)")
    sign, number, suffix = m.groups()
    mantissa = Fraction(number)
    fmt: Format
    if suffix in _BINARY:
        value = mantissa * 1024 ** _BINARY[suffix]
        fmt = "BinarySI"
    elif suffix in _DECIMAL:
        value = mantissa * Fraction(10) ** _DECIMAL[suffix]
        fmt = "DecimalSI"
    elif em := _EXPONENT.match(suffix):
        value = mantissa * Fraction(10) ** int(em.group(1))
        fmt = "DecimalExponent"
    else:
        raise QuantityError(f"{text!r} is not a quantity: unknown suffix {suffix!r} "
                            "(binary Ki..Ei, decimal n u m k M G T P E, or an exponent e3)")
    if sign == "-":
        value = -value
    return Quantity(_round_nano(value), fmt)


def is_quantity(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse(text)
    except QuantityError:
        return False
    return True


def of(value: str | int | Quantity) -> Quantity:
    """Accept what the API allows for a quantity field: a string, or a bare JSON number."""
    if isinstance(value, Quantity):
        return value
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Quantity(Fraction(value), "DecimalSI")
    if isinstance(value, float):
        return parse(repr(value))
    return parse(value)


def from_int(value: int, fmt: Format = "DecimalSI") -> Quantity:
    return Quantity(Fraction(value), fmt)


# The allocator counts in whole nano units (ints): exact, since parsing rounds to nano, and far
# faster than fractions in the search's inner loop.
NANO = 10**9


def units(value: str | int | Quantity) -> int:
    """A quantity as an integer number of nano units."""
    if isinstance(value, str):
        return _units_of_text(value)
    v = of(value).value * NANO
    assert v.denominator == 1
    return int(v)


@functools.lru_cache(maxsize=8192)
def _units_of_text(text: str) -> int:
    v = parse(text).value * NANO
    assert v.denominator == 1
    return int(v)


def from_units(n: int, fmt: Format = "DecimalSI") -> Quantity:
    return Quantity(Fraction(n, NANO), fmt)


@functools.lru_cache(maxsize=8192)
def format_units(n: int, fmt: Format = "DecimalSI") -> str:
    """canonical(from_units(n, fmt)), cached: results repeat the same few amounts."""
    return canonical(from_units(n, fmt))


def _decimal_parts(value: Fraction) -> tuple[int, int]:
    """value = mantissa * 10**exp with exp a multiple of 3 (>= -9) and exp as large as possible."""
    if value == 0:
        return 0, 0
    exp = -9
    mantissa = value * 10**9
    assert mantissa.denominator == 1, "quantities are whole nano units"
    m = int(mantissa)
    while m % 1000 == 0:
        m //= 1000
        exp += 3
    return m, exp


def canonical(q: Quantity) -> str:
    """The string Kubernetes prints for q (Quantity.String / CanonicalizeBytes)."""
    value = q.value
    fmt = q.format
    # Small or fractional binary quantities print as decimal, like Kubernetes does.
    if fmt == "BinarySI" and (abs(value) < 1024 or value.denominator != 1):
        fmt = "DecimalSI"
    if fmt == "BinarySI":
        n = int(value)
        power = 0
        while power < 6 and n != 0 and n % 1024 == 0:
            n //= 1024
            power += 1
        suffix = {0: ""} | {p: s for s, p in _BINARY.items()}
        return f"{n}{suffix[power]}"
    mantissa, exp = _decimal_parts(value)
    if fmt == "DecimalExponent":
        return f"{mantissa}" if exp == 0 else f"{mantissa}e{exp}"
    while exp > 18:  # no suffix above E: grow the mantissa instead
        mantissa *= 1000
        exp -= 3
    return f"{mantissa}{_DECIMAL_SUFFIX[exp]}"
