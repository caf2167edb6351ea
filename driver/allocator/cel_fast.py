"""The fast path: common selector shapes compiled to Python closures instead of run by cel-python.

Covered: `device.driver`, `device.allowMultipleAllocations`, attribute and capacity reads by literal
domain and name; string, int and bool literals; `quantity("...")` and `semver("..."[, bool])` of a
literal (folded once); `==`, `!=`, `<`, `<=`, `>`, `>=`; `x in [literals]` and `"name" in
device.attributes["D"]`; `has()` of an attribute or capacity; `compareTo`, `isGreaterThan`,
`isLessThan`; `&&`, `||`, `!` and parentheses. Anything else compiles to None and the expression
runs on cel-python.

A closure answers True or False only when it is sure, with CEL's rules: a missing attribute is an
error value, `&&` and `||` absorb errors commutatively (`false && error` is false, `error || true`
is true), `!error` and `error == x` stay errors. Whenever the answer would be an error (the caller
then asks cel-python, which words the message) or the operands are of kinds cel-python treats in
its own way (mixed types, quantities ordered with `<`, a non-boolean operand of `&&`), it raises
`Defer` and cel-python decides. tests/unit/allocator/test_allocator_cel_fast.py compares every
form with cel-python on random devices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celpy import celtypes

from driver.allocator import quantity as q
from driver.allocator import semver as sv
from driver.allocator.cel_ast import Node


class Defer(Exception):
    """This input is cel-python's to answer (an error, or a form the fast path does not decide)."""


class _Error:
    """CEL's error value inside the fast path (the message comes from cel-python)."""

    __slots__ = ()


ERROR = _Error()


class NotFast(Exception):
    """The expression has a shape the fast path does not compile."""


# A compiled node: device accessor -> value (a celtypes value, Quantity, Semver or ERROR).
Fn = Callable[[Any], Any]
_ORDERED = (celtypes.IntType, celtypes.StringType)
_EQUATABLE = (celtypes.IntType, celtypes.StringType, celtypes.BoolType, q.Quantity, sv.Semver)
_LITERALS = {"string": celtypes.StringType, "int": celtypes.IntType, "bool": celtypes.BoolType}


def compile_fast(node: Node) -> Callable[[Any], bool] | None:
    """A closure `device accessor -> bool` (raising Defer), or None when the shape is not covered.

    The accessor has `attribute(domain, name)`, `capacity(domain, name)` (both ERROR when
    missing), `domain(kind, domain)` (a dict of names), `driver` and `allow_multiple`."""
    try:
        fn = _bool(node)
    except NotFast:
        return None

    def run(device: Any) -> bool:
        result = fn(device)
        if result is ERROR:
            raise Defer
        return bool(result)

    return run


def _bool(node: Node) -> Fn:
    """A node in a logical position: its value must be a boolean or an error, else Defer."""
    kind = node[0]
    if kind == "and":
        return _and(_bool(node[1]), _bool(node[2]))
    if kind == "or":
        return _or(_bool(node[1]), _bool(node[2]))
    if kind == "not":
        inner = _bool(node[1])

        def negate(d: Any) -> Any:
            v = inner(d)
            return v if v is ERROR else celtypes.BoolType(not v)
        return negate
    value = _value(node)

    def checked(d: Any) -> Any:
        v = value(d)
        if v is ERROR or type(v) is celtypes.BoolType:
            return v
        raise Defer
    return checked


def _and(left: Fn, right: Fn) -> Fn:
    def both(d: Any) -> Any:
        a = left(d)
        if a is not ERROR and not a:
            return a
        b = right(d)
        if b is not ERROR and not b:
            return b
        return ERROR if a is ERROR or b is ERROR else a
    return both


def _or(left: Fn, right: Fn) -> Fn:
    def either(d: Any) -> Any:
        a = left(d)
        if a is not ERROR and a:
            return a
        b = right(d)
        if b is not ERROR and b:
            return b
        return ERROR if a is ERROR or b is ERROR else a
    return either


def _value(node: Node) -> Fn:
    kind = node[0]
    if kind == "lit":
        const = _LITERALS[node[1]](node[2])
        return lambda d: const
    if kind == "driver":
        return lambda d: d.driver
    if kind == "multi":
        return lambda d: d.allow_multiple
    if kind == "attr":
        domain, name = node[1], node[2]
        return lambda d: d.attribute(domain, name)
    if kind == "cap":
        domain, name = node[1], node[2]
        return lambda d: d.capacity(domain, name)
    if kind == "call" and node[1] == "has" and len(node[2]) == 1 and node[2][0][0] in ("attr", "cap"):
        map_kind, domain, name = node[2][0]
        return lambda d: celtypes.BoolType(name in d.domain(map_kind, domain))
    if kind == "call":
        const = _constant_call(node)
        return lambda d: const
    if kind == "cmp":
        return _compare(node[1], _value(node[2]), _value(node[3]))
    if kind == "in":
        return _in(node[1], node[2])
    if kind == "method":
        return _method(node)
    raise NotFast(kind)


def _constant_call(node: Node) -> Any:
    """quantity("1Gi"), semver("1.2.3"), semver("v1.2", true): folded once; a bad literal (a
    runtime error in CEL) is left to cel-python."""
    name, args = node[1], node[2]
    if not args or any(a[0] != "lit" for a in args):
        raise NotFast(name)
    values = [a[2] for a in args]
    kinds = [a[1] for a in args]
    try:
        if name == "quantity" and kinds == ["string"]:
            return q.parse(values[0])
        if name == "semver" and kinds in (["string"], ["string", "bool"]):
            return sv.parse(values[0], bool(values[1]) if len(values) > 1 else False)
    except (q.QuantityError, sv.SemverError):
        raise NotFast(name) from None
    raise NotFast(name)


def _compare(op: str, left: Fn, right: Fn) -> Fn:
    ordered = op not in ("==", "!=")
    kinds = _ORDERED if ordered else _EQUATABLE
    test: Callable[[Any, Any], bool] = {
        "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}[op]

    def compare(d: Any) -> Any:
        a = left(d)
        if a is ERROR:
            return ERROR
        b = right(d)
        if b is ERROR:
            return ERROR
        if type(a) is not type(b) or not isinstance(a, kinds):
            raise Defer
        return celtypes.BoolType(test(a, b))
    return compare


def _in(item_node: Node, container: Node) -> Fn:
    item = _value(item_node)
    if container[0] == "domain":
        map_kind, domain = container[1], container[2]

        def in_domain(d: Any) -> Any:
            key = item(d)
            if key is ERROR:
                return ERROR
            if type(key) is not celtypes.StringType:
                raise Defer
            return celtypes.BoolType(str(key) in d.domain(map_kind, domain))
        return in_domain
    if container[0] != "list" or not container[1] or any(n[0] != "lit" for n in container[1]):
        raise NotFast("in")
    kinds = {n[1] for n in container[1]}
    if len(kinds) != 1 or kinds == {"bool"}:
        raise NotFast("in")
    member_type = _LITERALS[kinds.pop()]
    members = frozenset(member_type(n[2]) for n in container[1])

    def in_list(d: Any) -> Any:
        v = item(d)
        if v is ERROR:
            return ERROR
        if type(v) is not member_type:
            raise Defer
        return celtypes.BoolType(v in members)
    return in_list


def _method(node: Node) -> Fn:
    name, target_node, args = node[1], node[2], node[3]
    if name not in ("compareTo", "isGreaterThan", "isLessThan") or len(args) != 1:
        raise NotFast(name)
    target, arg = _value(target_node), _value(args[0])

    def call(d: Any) -> Any:
        a = target(d)
        if a is ERROR:
            return ERROR
        b = arg(d)
        if b is ERROR:
            return ERROR
        if type(a) is q.Quantity and type(b) is q.Quantity:
            c = a.cmp(b)
        elif type(a) is sv.Semver and type(b) is sv.Semver:
            c = a.compare(b)
        else:
            raise Defer
        if name == "compareTo":
            return celtypes.IntType(c)
        return celtypes.BoolType(c > 0 if name == "isGreaterThan" else c < 0)
    return call
