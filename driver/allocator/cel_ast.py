"""A selector's parse tree, reduced to the few shapes the allocator reasons about, and what it reads.

cel-python's Lark tree has one node per grammar rule (expr > conditionalor > ... > primary); this
module folds it into small tuples (see `Node`) and recognises the ways a selector reaches into the
`device` variable: `device.driver`, `device.allowMultipleAllocations`, `device.attributes["D"].name`
(or `["name"]`), `device.capacity["D"].name`, and a whole domain map (`"x" in device.attributes["D"]`).

`reads(node)` lists those reads, or returns None ("reads the whole device") as soon as `device`
appears in any other position (passed to a function, indexed by a computed key, iterated...). The
result of a selector depends only on what it reads, so the allocator keys its result cache on the
values of those reads (tests/unit/allocator/test_allocator_cel_reads.py proves that on random devices
and expressions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import lark

DEVICE = "device"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Node shapes (plain tuples, built once per expression):
#   ("lit", kind, value)           kind: string | int | bool; value: the Python value
#   ("driver",) ("multi",)          device.driver, device.allowMultipleAllocations
#   ("attr", domain, name) ("cap", domain, name)
#   ("domain", "attr"|"cap", domain)   the whole map of one domain
#   ("and", a, b) ("or", a, b) ("not", a) ("cmp", op, a, b) ("in", a, b) ("list", items)
#   ("call", name, args) ("method", name, target, args)
#   ("ident", name) ("dot", target, field) ("index", target, key)
#   ("other", rule, children)      anything else; children are reduced too
Node = tuple

_SIMPLE_STRING = re.compile(r'^(?:"([^"\\\n]*)"|\'([^\'\\\n]*)\')$')
_DECIMAL_INT = re.compile(r"^-?[0-9]+$")
_RELATIONS = {"relation_eq": "==", "relation_ne": "!=", "relation_lt": "<", "relation_le": "<=",
              "relation_gt": ">", "relation_ge": ">=", "relation_in": "in"}
_DEVICE_MAPS = {"attributes": "attr", "capacity": "cap"}
_DEVICE_FIELDS = {"driver": ("driver",), "allowMultipleAllocations": ("multi",)}


def reduce(tree: Any) -> Node:
    """The Lark tree of one expression -> a Node."""
    if isinstance(tree, lark.Token):
        # An identifier anywhere else (`.device`, a message name) is kept as one, so that a
        # `device` there reads as "the whole device".
        return ("ident", str(tree)) if tree.type == "IDENT" else ("other", tree.type, (str(tree),))
    rule, ch = str(tree.data), tree.children
    if rule in ("expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication",
                "unary", "member", "primary") and len(ch) == 1:
        return reduce(ch[0])
    if rule == "conditionalor" and len(ch) == 2:
        return ("or", reduce(ch[0]), reduce(ch[1]))
    if rule == "conditionaland" and len(ch) == 2:
        return ("and", reduce(ch[0]), reduce(ch[1]))
    if rule == "relation" and len(ch) == 2 and str(ch[0].data) in _RELATIONS:
        op = _RELATIONS[str(ch[0].data)]
        left, right = reduce(ch[0].children[0]), reduce(ch[1])
        return ("in", left, right) if op == "in" else ("cmp", op, left, right)
    if rule == "unary" and len(ch) == 2 and str(ch[0].data) == "unary_not":
        return ("not", reduce(ch[1]))
    if rule == "paren_expr":
        return reduce(ch[0])
    if rule == "literal":
        return _literal(ch[0])
    if rule == "ident":
        return ("ident", str(ch[0]))
    if rule == "list_lit":
        return ("list", _exprlist(ch[0]) if ch else ())
    if rule == "ident_arg":
        return ("call", str(ch[0]), _exprlist(ch[1]) if len(ch) > 1 else ())
    if rule == "member_dot_arg":
        return ("method", str(ch[1]), reduce(ch[0]), _exprlist(ch[2]) if len(ch) > 2 else ())
    if rule == "member_dot":
        return _device_access(("dot", reduce(ch[0]), str(ch[1])))
    if rule == "member_index":
        return _device_access(("index", reduce(ch[0]), reduce(ch[1])))
    return ("other", rule, tuple(reduce(c) for c in ch))


def _exprlist(tree: Any) -> tuple[Node, ...]:
    return tuple(reduce(c) for c in tree.children)


def _literal(token: Any) -> Node:
    text = str(token)
    if token.type == "STRING_LIT":
        m = _SIMPLE_STRING.match(text)
        if m:
            return ("lit", "string", m.group(1) if m.group(1) is not None else m.group(2))
    elif token.type == "INT_LIT" and _DECIMAL_INT.match(text) and INT64_MIN <= int(text) <= INT64_MAX:
        return ("lit", "int", int(text))
    elif token.type == "BOOL_LIT":
        return ("lit", "bool", text == "true")
    # Escapes, raw and bytes strings, hex, uint, double, null: left to cel-python.
    return ("other", "literal", (("other", token.type, (text,)),))


def _string_key(node: Node) -> str | None:
    return node[2] if node[0] == "lit" and node[1] == "string" else None


def _device_access(node: Node) -> Node:
    """Recognise device.driver, device.attributes["D"], device.attributes["D"].name and kin."""
    kind, target, sel = node
    if target == ("ident", DEVICE) and kind == "dot" and sel in _DEVICE_FIELDS:
        return _DEVICE_FIELDS[sel]
    if (kind == "index" and target[0] == "dot" and target[1] == ("ident", DEVICE)
            and target[2] in _DEVICE_MAPS and _string_key(sel) is not None):
        return ("domain", _DEVICE_MAPS[target[2]], _string_key(sel))
    if target[0] == "domain":
        name = sel if kind == "dot" else _string_key(sel)
        if name is not None:
            return (target[1], target[2], name)
    return node


@dataclass(frozen=True, slots=True)
class Read:
    """One thing a selector reads from a device: kind driver | multi | attr | cap | domain."""

    kind: str
    map_kind: str = ""    # for domain: attr | cap
    domain: str = ""
    name: str = ""
    qualified: str = field(default="", init=False, compare=False, repr=False)  # "domain/name"

    def __post_init__(self) -> None:
        object.__setattr__(self, "qualified", f"{self.domain}/{self.name}")


def reads(node: Node) -> tuple[Read, ...] | None:
    """What the expression reads from `device`, sorted; None when it may read anything."""
    found: set[Read] = set()
    if not _collect(node, found):
        return None
    return tuple(sorted(found, key=lambda r: (r.kind, r.map_kind, r.domain, r.name)))


def calls(node: Node, name: str) -> bool:
    """Whether the expression calls the function or macro `name` anywhere, as `name(...)` or as a
    method `x.name(...)`."""
    if node[0] in ("call", "method") and node[1] == name:
        return True
    if node[0] in _LEAVES:
        return False
    return any(calls(child, name) for child in _children(node))


_LEAVES = ("lit", "driver", "multi", "attr", "cap", "domain", "ident")


_READ_SETS: dict[tuple[Read, ...], int] = {}


def read_set_id(found: tuple[Read, ...]) -> int:
    """A small number per distinct read set, so devices can remember their input keys by it."""
    return _READ_SETS.setdefault(found, len(_READ_SETS))


def _collect(node: Node, found: set[Read]) -> bool:
    kind = node[0]
    if kind in ("driver", "multi"):
        found.add(Read(kind))
        return True
    if kind in ("attr", "cap"):
        found.add(Read(kind, domain=node[1], name=node[2]))
        return True
    if kind == "domain":
        found.add(Read("domain", node[1], node[2]))
        return True
    if kind == "ident":
        return node[1] != DEVICE
    if kind == "lit":
        return True
    return all(_collect(child, found) for child in _children(node))


def _children(node: Node) -> list[Node]:
    kind = node[0]
    if kind in ("and", "or"):
        return [node[1], node[2]]
    if kind == "not":
        return [node[1]]
    if kind == "cmp":
        return [node[2], node[3]]
    if kind == "in":
        return [node[1], node[2]]
    if kind == "list":
        return list(node[1])
    if kind == "call":
        return list(node[2])
    if kind == "method":
        return [node[2], *node[3]]
    if kind == "dot":
        return [node[1]]
    if kind == "index":
        return [node[1], node[2]]
    return [c for c in node[2] if isinstance(c, tuple)]
