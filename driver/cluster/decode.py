"""JSON from the API server, decoded one object at a time with a nesting limit.

A tenant writes ResourceClaims, and opaque parameters are free-form: the API server admits a claim nested a
few thousand levels deep (it is well under the size limit). Python's json decoder recurses, so one such
claim makes `json.loads` of the whole list raise RecursionError, and every reader of the list (the
controller's reflector, which would relist forever) fails with it. Here:

- `decode_list(data)` decodes a list response. The fast path is one `json.loads`; when that fails on
  nesting (or the document is not valid as a whole), the `items` array is split into its objects by a
  linear scan that tracks only strings and brackets, and each object is decoded on its own. Every object
  is then checked against `MAX_DEPTH`. A bad object becomes a `BadObject` (its kind, namespace, name and
  why, as far as they can be read) and is left out; the others are returned.
- `decode_object(data, what)` decodes one object (a GET, one watch line) and raises `DecodeError` naming
  `what` when it is too deep or not JSON.
- `too_deep(value)` walks an already decoded value without recursion; callers that take objects from
  elsewhere (files for `carve allocate` / `carve simulate`, the client's models) use it at their edge.

No schema of a Kubernetes kind nests more than about 20 levels; `MAX_DEPTH` leaves room for opaque
parameters of reasonable shape. Cost: the scan runs only when the fast path failed; the depth check is
one pass over the decoded values (tests/benchmarks/test_decode_cost.py prints its ratio to json.loads).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 100

# A JSON string (escapes included) or one bracket; everything else in JSON is flat.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_META = re.compile(r'"metadata"\s*:\s*\{')
_FIELD = {k: re.compile(rf'"{k}"\s*:\s*"([^"\\]{{0,253}})"') for k in ("name", "namespace", "uid")}
_KIND = re.compile(r'"kind"\s*:\s*"([^"\\]{0,63})"')


class DecodeError(ValueError):
    """A document or object that cannot be decoded within the limits; names the object."""


@dataclass(frozen=True)
class BadObject:
    """An object of a list that was left out, and why (for logs and Events)."""

    kind: str
    namespace: str
    name: str
    uid: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name or "(unnamed)"
        return f"{self.kind or 'object'} {where}: {self.reason}"


def too_deep(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """The path of the first map or list nested deeper than `limit`, or None; iterative."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        if depth > limit:
            return _path_to_depth(value, limit)
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return None


def _path_to_depth(value: Any, limit: int) -> str:
    """Where a value first goes deeper than `limit` (only called once one is known to)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        v, depth, path = stack.pop()
        if not isinstance(v, dict | list):
            continue
        if depth > limit:
            return path or "."
        items = v.items() if isinstance(v, dict) else enumerate(v)
        for k, c in items:
            stack.append((c, depth + 1, f"{path}.{k}" if isinstance(v, dict) else f"{path}[{k}]"))
    return "."


def _shorten(path: str, keep: int = 120) -> str:
    return path if len(path) <= keep else path[:keep] + "..."


def check_depth(obj: Any, what: str, limit: int = MAX_DEPTH) -> None:
    """Raise DecodeError naming `what` and the field when `obj` nests deeper than `limit`."""
    path = too_deep(obj, limit)
    if path is not None:
        raise DecodeError(f"{what}: {_shorten(path.lstrip('.'))}: nested deeper than {limit} levels")


def decode_object(data: bytes | str, what: str, limit: int = MAX_DEPTH) -> Any:
    """One JSON document; DecodeError (naming `what`) when it is not JSON or nests too deep."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise DecodeError(f"{what}: nested deeper than the decoder can follow (limit {limit})") from None
    except ValueError as e:
        raise DecodeError(f"{what} is not JSON: {e}") from None
    check_depth(value, what, limit)
    return value


Decoded = tuple[dict[str, Any], list[dict], list[BadObject]]


def decode_list(data: bytes | str, limit: int = MAX_DEPTH) -> Decoded:
    """A list response -> (its top level without items, the good items, the bad ones)."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes | bytearray) else data
    try:
        whole = json.loads(text or "{}")
    except (RecursionError, ValueError):
        whole = None
    if isinstance(whole, dict):
        items = whole.pop("items", None) or []
        if not isinstance(items, list):
            raise DecodeError(f"list: items: expected a list, got {type(items).__name__}")
        good, bad = [], []
        for i, item in enumerate(items):
            reason = _item_problem(item, limit)
            if reason:
                bad.append(_bad_from_value(item, i, reason))
            else:
                good.append(item)
        return whole, good, bad
    return _decode_by_item(text, limit)


def _item_problem(item: Any, limit: int) -> str:
    if not isinstance(item, dict):
        return f"expected an object, got {type(item).__name__}"
    path = too_deep(item, limit)
    return f"{_shorten(path.lstrip('.'))}: nested deeper than {limit} levels" if path else ""


def _bad_from_value(item: Any, index: int, reason: str) -> BadObject:
    meta = item.get("metadata") if isinstance(item, dict) else None
    meta = meta if isinstance(meta, dict) else {}

    def text(v: Any) -> str:
        return v if isinstance(v, str) else ""

    return BadObject(text(item.get("kind")) if isinstance(item, dict) else "", text(meta.get("namespace")),
                     text(meta.get("name")) or f"items[{index}]", text(meta.get("uid")), reason)


def _decode_by_item(text: str, limit: int) -> Decoded:
    """The slow path: find each object of the top-level `items` array by a scan, decode them one by one."""
    depth = 0
    key = ""  # the last string seen at depth 1 (a key of the top-level object)
    in_items = False
    start = -1
    spans: list[tuple[int, int]] = []
    top: dict[str, Any] = {}
    meta_span: tuple[int, int] | None = None
    meta_start = -1
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok[0] == '"':
            if depth == 1:
                key = tok
            continue
        if tok in "[{":
            depth += 1
            if depth == 2 and tok == "[" and key == '"items"':
                in_items = True
            elif depth == 2 and tok == "{" and key == '"metadata"':
                meta_start = m.start()
            elif depth == 3 and tok == "{" and in_items:
                start = m.start()
        else:
            if depth == 3 and tok == "}" and in_items and start >= 0:
                spans.append((start, m.end()))
                start = -1
            elif depth == 2 and tok == "]" and in_items:
                in_items = False
            elif depth == 2 and tok == "}" and meta_start >= 0:
                meta_span = (meta_start, m.end())
                meta_start = -1
            depth -= 1
            if depth == 1:
                key = ""
    if depth != 0:
        raise DecodeError("list: not valid JSON (unbalanced brackets)")
    if meta_span is not None:
        try:
            top["metadata"] = json.loads(text[meta_span[0]:meta_span[1]])
        except (RecursionError, ValueError):
            top["metadata"] = {}
    good: list[dict] = []
    bad: list[BadObject] = []
    for i, (a, b) in enumerate(spans):
        piece = text[a:b]
        try:
            item = json.loads(piece)
        except RecursionError:
            bad.append(_bad_from_text(piece, i, f"nested deeper than {limit} levels"))
            continue
        except ValueError as e:
            bad.append(_bad_from_text(piece, i, f"is not JSON: {e}"))
            continue
        reason = _item_problem(item, limit)
        if reason:
            bad.append(_bad_from_value(item, i, reason))
        else:
            good.append(item)
    return top, good, bad


def _bad_from_text(piece: str, index: int, reason: str) -> BadObject:
    """Name an object that could not be decoded from its text (the API server writes metadata first)."""
    found = {k: "" for k in _FIELD}
    m = _META.search(piece)
    if m:
        head = piece[m.end():m.end() + 4096]
        for k, pattern in _FIELD.items():
            f = pattern.search(head)
            if f:
                found[k] = f.group(1)
    kind = _KIND.search(piece[:4096])
    return BadObject(kind.group(1) if kind else "", found["namespace"], found["name"] or f"items[{index}]",
                     found["uid"], reason)
