"""The cost budget of one selector: a worst-case estimate at compile time and a meter at run time.

Kubernetes admits a device selector only when cel-go's worst-case cost estimate stays within
`CELSelectorExpressionMaxCost` (1,000,000; resource.k8s.io validation) and evaluates it with that
number as the runtime cost limit (staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go).
cel-python has neither, and the controller, `carve allocate`, `carve simulate` and the extender run
tenants' selectors in one process for the whole cluster, so carve keeps its own, in the same units:

- `estimate(node)`: the worst-case cost of the reduced parse tree (cel_ast). One unit per node
  visited, strings traversed at 0.1 a character, a regex costing (string length x 0.1) x (pattern
  length x 0.25) as in cel-go, macros (`all`, `exists`, `exists_one`, `map`, `filter`) costing their
  body once per element. Sizes come from what a device can hold: a string or version attribute is at
  most 64 characters (DeviceAttributeMaxValueLength), a domain map at most 32 entries
  (ResourceSliceMaxAttributesAndCapacitiesPerDevice), literals are their own size, and a string
  built at run time is bounded by its inputs. An expression over the limit fails to compile.
- `Meter`: charged by the library functions (cel_library) with the sizes they actually handle, and
  by the regex functions with cel-go's regex cost; evaluation stops at `MAX_COST` or after
  `Meter.seconds` of wall time, whichever comes first. The meter is the backstop for sizes the
  estimate assumed (a slice from a file may carry longer strings than the API allows); the
  estimate bounds what the meter cannot see (the macros' iterations inside cel-python).

An exceeded budget is a CelError for that selector, which fails the claim that uses it, not the run.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

from driver.allocator.cel_ast import Node

# resource.k8s.io: CELSelectorExpressionMaxCost.
MAX_COST = 1_000_000
# resource.k8s.io: DeviceAttributeMaxValueLength, ResourceSliceMaxAttributesAndCapacitiesPerDevice.
MAX_ATTRIBUTE_LENGTH = 64
MAX_DOMAIN_ENTRIES = 32
# cel-go's cost factors (common/cost.go).
STRING_TRAVERSAL = 0.1
REGEX_LENGTH = 0.25

_MACROS = ("all", "exists", "exists_one", "map", "filter")


class CostLimitExceeded(Exception):
    """The selector went over its budget; carries the sentence the user sees."""


def regex_cost(text_length: int, pattern_length: int) -> int:
    """cel-go's cost of one `matches`/`find`/`findAll`: string traversal times pattern size."""
    return math.ceil(text_length * STRING_TRAVERSAL) * max(1, math.ceil(pattern_length * REGEX_LENGTH))


def traversal_cost(length: int) -> int:
    return math.ceil(length * STRING_TRAVERSAL)


@dataclass(frozen=True)
class Estimate:
    """Worst-case cost of a node and the largest size of its value (characters or elements)."""

    cost: int
    size: int = 1
    item: int = 1  # for lists: the largest size of one element


def estimate(node: Node) -> Estimate:
    """The worst-case cost of evaluating `node` (see the module docstring for the rules)."""
    kind = node[0]
    if kind == "lit":
        return Estimate(1, len(node[2]) if node[1] == "string" else 1)
    if kind in ("driver", "multi", "attr", "cap"):
        return Estimate(1, MAX_ATTRIBUTE_LENGTH)
    if kind == "domain":
        return Estimate(1, MAX_DOMAIN_ENTRIES, MAX_ATTRIBUTE_LENGTH)
    if kind == "ident":
        return Estimate(1, MAX_ATTRIBUTE_LENGTH)
    if kind in ("and", "or"):
        a, b = estimate(node[1]), estimate(node[2])
        return Estimate(1 + a.cost + b.cost)
    if kind == "not":
        return Estimate(1 + estimate(node[1]).cost)
    if kind in ("cmp", "in"):
        a, b = estimate(node[-2]), estimate(node[-1])
        if kind == "in":
            scan = b.size * max(1, traversal_cost(a.size))
        else:
            scan = traversal_cost(min(a.size, b.size))
        return Estimate(1 + a.cost + b.cost + scan)
    if kind == "list":
        items = [estimate(n) for n in node[1]]
        return Estimate(1 + sum(i.cost for i in items), len(items), max((i.size for i in items), default=1))
    if kind == "call":
        return _function(node[1], None, [estimate(a) for a in node[2]])
    if kind == "method":
        name, target, args = node[1], estimate(node[2]), node[3]
        if name in _MACROS and len(args) == 2:
            body = estimate(args[1])
            size = target.size if name in ("map", "filter") else 1
            return Estimate(1 + target.cost + target.size * (body.cost + 1), size, body.size)
        return _function(name, target, [estimate(a) for a in args])
    # Anything else (`+`, `?:`, indexing, conversions): its children, and a value no larger than
    # all of them together (string and list concatenation).
    children = [estimate(c) for c in _children(node)]
    return Estimate(1 + sum(c.cost for c in children), max(1, sum(c.size for c in children)),
                    max((c.item for c in children), default=1))


def _children(node: Node) -> list[Node]:
    if node[0] in ("dot",):
        return [node[1]]
    if node[0] == "index":
        return [node[1], node[2]]
    return [c for c in node[2] if isinstance(c, tuple)] if len(node) > 2 else []


def _function(name: str, target: Estimate | None, args: list[Estimate]) -> Estimate:
    operands = ([target] if target is not None else []) + args
    base = 1 + sum(o.cost for o in operands)
    first = operands[0].size if operands else 1
    item = operands[0].item if operands else 1
    second = operands[1].size if len(operands) > 1 else 1
    if name in ("matches", "find"):
        return Estimate(base + regex_cost(first, second), first)
    if name == "findAll":
        return Estimate(base + regex_cost(first, second), first + 1, first)
    if name == "replace":
        third = operands[2].size if len(operands) > 2 else 1
        return Estimate(base + traversal_cost(first) * max(1, third), first * max(1, third))
    if name == "split":
        return Estimate(base + traversal_cost(first), first + 1, first)
    if name == "join":
        return Estimate(base + traversal_cost(first * item), first * (item + second))
    if name in ("lowerAscii", "upperAscii", "reverse", "trim", "substring", "charAt"):
        return Estimate(base + traversal_cost(first), first)
    if name in ("indexOf", "lastIndexOf", "contains", "startsWith", "endsWith"):
        return Estimate(base + traversal_cost(first) * max(1, traversal_cost(second)))
    if name in ("isSorted", "sum", "min", "max", "size"):
        return Estimate(base + first)
    # quantity, semver and their methods, conversions: constant work on bounded values.
    return Estimate(base + traversal_cost(first), max(first, 1))


class Meter:
    """The runtime budget of the evaluation running on this thread (one at a time per thread)."""

    seconds = 1.0  # wall-clock backstop per evaluation; the cost limit decides first in practice

    _local = threading.local()

    @classmethod
    def start(cls, limit: int = MAX_COST) -> None:
        cls._local.state = [0, limit, time.monotonic() + cls.seconds, None]

    @classmethod
    def stop(cls) -> str | None:
        """End the evaluation; the reason it went over budget (also kept in `last`), or None."""
        state = getattr(cls._local, "state", None)
        cls._local.state = None
        cls._local.last = None if state is None else state[3]
        return cls._local.last

    @classmethod
    def last_reason(cls) -> str:
        return getattr(cls._local, "last", None) or ""

    @classmethod
    def charge(cls, cost: int) -> None:
        """Spend `cost` units; raises CostLimitExceeded (and remembers why) once over budget."""
        state = getattr(cls._local, "state", None)
        if state is None:
            return
        if state[3] is not None:
            raise CostLimitExceeded(state[3])
        state[0] += cost
        if state[0] > state[1]:
            state[3] = f"CEL cost limit exceeded: more than {state[1]} units (the API server's limit)"
        elif time.monotonic() > state[2]:
            state[3] = f"CEL evaluation took more than {cls.seconds:g}s"
        if state[3] is not None:
            raise CostLimitExceeded(state[3])
