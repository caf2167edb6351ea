"""The Kubernetes CEL libraries device selectors use, as cel-python functions.

cel-python calls a method `x.f(y)` as the function `f(x, y)`, so one Python function serves each
CEL name and dispatches on its receiver: `compareTo` works on quantities and on semvers,
`indexOf` on strings and lists. Errors raise `CelFunctionError`, which `_soft` returns as
cel-python's error value: it fails the selector unless `&&`/`||` absorb it, as in Kubernetes.

Covered: the quantity library, the semver library, the extended strings library (charAt, indexOf,
lastIndexOf, lowerAscii, upperAscii, replace, split, substring, trim, join, reverse), the regex
library (find, findAll, matches) and the lists library (isSorted, sum, max, indexOf,
lastIndexOf). `startsWith`, `endsWith`, `contains` and `size` are cel-python built-ins, and so is
`min` (cel-python parses `x.min()` as its own macro, which no function of ours can replace: cel.py
runs a selector that calls it on the interpreted runner, the one that evaluates that macro).

Regexes are RE2 (google-re2), as in cel-go: linear in the input, no backreferences or lookaround
(a pattern using them is a runtime error, as it is a compile error in Kubernetes). Python's `re`
backtracks: `"(a+)+$"` against forty characters takes hours. Every call charges the evaluation's
cost meter (cel_cost.Meter) for what it handles, in cel-go's units.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import celpy
import re2
from celpy import celtypes

from driver.allocator import quantity as q
from driver.allocator import semver as sv
from driver.allocator.cel_cost import Meter, regex_cost, traversal_cost


class CelFunctionError(Exception):
    """A library function called with values it does not accept (a CEL runtime error)."""


def _soft(function: Callable[..., Any]) -> Callable[..., Any]:
    """Return a library error as CEL's error value instead of raising it, so that `&&` and `||`
    absorb it as Kubernetes does (`false && x.isGreaterThan(bad)` is false). The transpiled code
    calls a function by `<module>.<qualname>`, which names this wrapper (wraps keeps both)."""

    @functools.wraps(function)
    def call(*args: Any) -> Any:
        size = 0
        for a in args:  # cel-python hands an error operand to the function: pass it on
            if isinstance(a, celpy.CELEvalError):
                return a
            if isinstance(a, (str, list)):
                size += len(a)
        Meter.charge(1 + traversal_cost(size))
        try:
            return function(*args)
        except CelFunctionError as e:
            return celpy.CELEvalError(str(e), CelFunctionError, (str(e),))

    return call


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise CelFunctionError(f"{what}: expected a string, got {type(value).__name__}")
    return str(value)


def _qty(value: Any, what: str) -> q.Quantity:
    if not isinstance(value, q.Quantity):
        raise CelFunctionError(f"{what}: expected a quantity, got {type(value).__name__}")
    return value


# --- quantity library -------------------------------------------------------------------------

@_soft
def quantity(text: Any) -> q.Quantity:
    try:
        return q.parse(_str(text, "quantity"))
    except q.QuantityError as e:
        raise CelFunctionError(str(e)) from None


@_soft
def isQuantity(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(q.is_quantity(str(text)) if isinstance(text, str) else False)


def _addend(value: Any, what: str) -> q.Quantity:
    # CEL's bool is an int in Python (celtypes.BoolType): Kubernetes has no add(Quantity, bool)
    if isinstance(value, int) and not isinstance(value, (bool, celtypes.BoolType)):
        return q.from_int(int(value))
    return _qty(value, what)


@_soft
def add(left: Any, right: Any) -> q.Quantity:
    return _qty(left, "add") + _addend(right, "add")


@_soft
def sub(left: Any, right: Any) -> q.Quantity:
    return _qty(left, "sub") - _addend(right, "sub")


@_soft
def asInteger(value: Any) -> celtypes.IntType:
    v = _qty(value, "asInteger")
    if not v.is_integer() or not q.INT64_MIN <= v.value <= q.INT64_MAX:
        raise CelFunctionError(f"cannot convert value {v} to an integer")
    return celtypes.IntType(int(v.value))


@_soft
def asApproximateFloat(value: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_qty(value, "asApproximateFloat").value))


@_soft
def sign(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_qty(value, "sign").sign())


@_soft
def isInteger(value: Any) -> celtypes.BoolType:
    v = _qty(value, "isInteger")
    return celtypes.BoolType(v.is_integer() and q.INT64_MIN <= v.value <= q.INT64_MAX)


# --- semver library ---------------------------------------------------------------------------

@_soft
def semver(text: Any, normalize: Any = False) -> sv.Semver:
    try:
        return sv.parse(_str(text, "semver"), bool(normalize))
    except sv.SemverError as e:
        raise CelFunctionError(str(e)) from None


@_soft
def isSemver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    return celtypes.BoolType(isinstance(text, str) and sv.is_semver(str(text), bool(normalize)))


def _ver(value: Any, what: str) -> sv.Semver:
    if not isinstance(value, sv.Semver):
        raise CelFunctionError(f"{what}: expected a semver, got {type(value).__name__}")
    return value


@_soft
def major(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_ver(value, "major").major)


@_soft
def minor(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_ver(value, "minor").minor)


@_soft
def patch(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_ver(value, "patch").patch)


# --- shared comparison (quantity and semver) --------------------------------------------------

def _cmp(left: Any, right: Any, what: str) -> int:
    if isinstance(left, q.Quantity):
        return left.cmp(_qty(right, what))
    if isinstance(left, sv.Semver):
        return left.compare(_ver(right, what))
    raise CelFunctionError(f"{what}: expected a quantity or a semver, got {type(left).__name__}")


@_soft
def compareTo(left: Any, right: Any) -> celtypes.IntType:
    return celtypes.IntType(_cmp(left, right, "compareTo"))


@_soft
def isGreaterThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_cmp(left, right, "isGreaterThan") > 0)


@_soft
def isLessThan(left: Any, right: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_cmp(left, right, "isLessThan") < 0)


# --- extended strings -------------------------------------------------------------------------

@_soft
def charAt(s: Any, i: Any) -> celtypes.StringType:
    text, index = _str(s, "charAt"), int(i)
    if not 0 <= index <= len(text):
        raise CelFunctionError(f"charAt: index out of range: {index}")
    return celtypes.StringType(text[index:index + 1])


@_soft
def indexOf(s: Any, sub: Any, start: Any = 0) -> celtypes.IntType:
    if isinstance(s, list):
        for i, item in enumerate(s):
            if item == sub:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, begin = _str(s, "indexOf"), int(start)
    if not 0 <= begin <= len(text):
        raise CelFunctionError(f"indexOf: index out of range: {begin}")
    return celtypes.IntType(text.find(_str(sub, "indexOf"), begin))


@_soft
def lastIndexOf(s: Any, sub: Any, end: Any = None) -> celtypes.IntType:
    if isinstance(s, list):
        for i in range(len(s) - 1, -1, -1):
            if s[i] == sub:
                return celtypes.IntType(i)
        return celtypes.IntType(-1)
    text, needle = _str(s, "lastIndexOf"), _str(sub, "lastIndexOf")
    if end is None:
        return celtypes.IntType(text.rfind(needle))
    stop = int(end)
    if not 0 <= stop <= len(text):
        raise CelFunctionError(f"lastIndexOf: index out of range: {stop}")
    return celtypes.IntType(text.rfind(needle, 0, stop + len(needle)))


def _ascii_map(text: str, upper: bool) -> str:
    # Only ASCII letters change, as in cel-go's lowerAscii/upperAscii.
    if upper:
        return "".join(chr(ord(c) - 32) if "a" <= c <= "z" else c for c in text)
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


@_soft
def lowerAscii(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_ascii_map(_str(s, "lowerAscii"), upper=False))


@_soft
def upperAscii(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_ascii_map(_str(s, "upperAscii"), upper=True))


@_soft
def replace(s: Any, old: Any, new: Any, n: Any = -1) -> celtypes.StringType:
    text, before, after, count = _str(s, "replace"), _str(old, "replace"), _str(new, "replace"), int(n)
    # Charge the result's size before building it: nested replaces grow a string geometrically.
    hits = text.count(before)  # str.count("") is len + 1, as Go's strings.Count
    if count >= 0:
        hits = min(hits, count)
    Meter.charge(traversal_cost(len(text) + hits * len(after)))
    return celtypes.StringType(text.replace(before, after, count if count >= 0 else -1))


@_soft
def split(s: Any, sep: Any, n: Any = -1) -> celtypes.ListType:
    text, separator, limit = _str(s, "split"), _str(sep, "split"), int(n)
    if limit == 0:
        return celtypes.ListType([])
    if separator == "":
        parts = list(text)
        if limit > 0 and len(parts) > limit:
            parts = [*parts[:limit - 1], "".join(parts[limit - 1:])]
    else:
        parts = text.split(separator, limit - 1 if limit > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


@_soft
def substring(s: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text = _str(s, "substring")
    begin, stop = int(start), len(text) if end is None else int(end)
    if not 0 <= begin <= stop <= len(text):
        raise CelFunctionError(f"substring: index out of range: {begin}..{stop} of {len(text)}")
    return celtypes.StringType(text[begin:stop])


@_soft
def trim(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_str(s, "trim").strip())


@_soft
def join(items: Any, sep: Any = "") -> celtypes.StringType:
    if not isinstance(items, list):
        raise CelFunctionError(f"join: expected a list of strings, got {type(items).__name__}")
    return celtypes.StringType(_str(sep, "join").join(_str(i, "join") for i in items))


@_soft
def reverse(s: Any) -> celtypes.StringType:
    return celtypes.StringType(_str(s, "reverse")[::-1])


# --- regex --------------------------------------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # an invalid pattern is the selector's error, not a log line


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as e:
        detail = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise CelFunctionError(f"invalid regex {pattern!r}: {detail}") from None


def _compiled(text: str, pattern: str) -> Any:
    Meter.charge(regex_cost(len(text), len(pattern)))
    return _regex(pattern)


@_soft
def matches(s: Any, pattern: Any) -> celtypes.BoolType:
    text, expr = _str(s, "matches"), _str(pattern, "matches")
    return celtypes.BoolType(_compiled(text, expr).search(text) is not None)


@_soft
def find(s: Any, pattern: Any) -> celtypes.StringType:
    text, expr = _str(s, "find"), _str(pattern, "find")
    m = _compiled(text, expr).search(text)
    return celtypes.StringType(m.group(0) if m else "")


@_soft
def findAll(s: Any, pattern: Any, n: Any = -1) -> celtypes.ListType:
    text, expr, limit = _str(s, "findAll"), _str(pattern, "findAll"), int(n)
    found: list[celtypes.StringType] = []
    for m in _compiled(text, expr).finditer(text):
        if 0 <= limit <= len(found):
            break
        found.append(celtypes.StringType(m.group(0)))
    return celtypes.ListType(found)


# --- lists --------------------------------------------------------------------------------

def _list(value: Any, what: str) -> list:
    if not isinstance(value, list):
        raise CelFunctionError(f"{what}: expected a list, got {type(value).__name__}")
    return value


@_soft
def isSorted(items: Any) -> celtypes.BoolType:
    xs = _list(items, "isSorted")
    return celtypes.BoolType(all(not (b < a) for a, b in itertools.pairwise(xs)))


@_soft
def list_sum(items: Any) -> Any:
    xs = _list(items, "sum")
    if not xs:
        return celtypes.IntType(0)
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total


def _extreme(items: Any, what: str, pick: Callable[[Any, Any], bool]) -> Any:
    xs = _list(items, what)
    if not xs:
        raise CelFunctionError(f"{what}: empty list")
    best = xs[0]
    for x in xs[1:]:
        if pick(x, best):
            best = x
    return best


@_soft
def list_max(items: Any) -> Any:
    return _extreme(items, "max", lambda a, b: a > b)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        quantity, isQuantity, add, sub, asInteger, asApproximateFloat, sign, isInteger,
        semver, isSemver, major, minor, patch, compareTo, isGreaterThan, isLessThan,
        charAt, indexOf, lastIndexOf, lowerAscii, upperAscii, replace, split, substring, trim,
        join, reverse, matches, find, findAll, isSorted,
    )
} | {"sum": list_sum, "max": list_max}
