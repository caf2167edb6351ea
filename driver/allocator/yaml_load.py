"""Loading large YAML fast: libyaml's C parser and a lean builder for plain data.

`carve allocate` reads the ResourceSlices of whole clusters (megabytes of YAML). PyYAML's C loader
(`yaml.CSafeLoader`, built on libyaml) parses in C but then composes a node graph, resolves every
plain scalar's tag with regular expressions and builds objects through the generic constructor,
which together cost several times the parse. `load_all` keeps libyaml and SafeLoader's meaning
exactly and skips that work for plain data: documents are built straight from libyaml's events,
a scalar's resolved tag is remembered per (value, style) (slices repeat the same few keys and
values), and ints, bools, nulls and floats are made by SafeLoader's own constructors. A stream with
anything else (explicit tags, timestamps, merge keys, complex keys) is read by FastSafeLoader
(CSafeLoader with the remembered tags and a direct builder for maps, lists and strings, falling
back to SafeLoader's constructors). Where PyYAML lacks libyaml, SafeLoader is used as is.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

HAS_LIBYAML = hasattr(yaml, "CSafeLoader")
_BASE: Any = yaml.CSafeLoader if HAS_LIBYAML else yaml.SafeLoader
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_SPECIAL_KEYS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:value")
_RESOLVED_MAX = 200_000  # distinct scalars remembered per loader


class FastSafeLoader(_BASE):  # type: ignore[misc, valid-type]
    """SafeLoader's result, built faster on libyaml (see the module docstring)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._resolved: dict[tuple[str, tuple[bool, bool]], str] = {}
        self._built: dict[int, Any] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        # SafeLoader's resolvers depend only on (kind, value, implicit): no path resolvers.
        if kind is not ScalarNode or self.yaml_path_resolvers:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = self._resolved.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(self._resolved) < _RESOLVED_MAX:
                self._resolved[key] = tag
        return tag

    def construct_document(self, node: Any) -> Any:
        try:
            return self._build(node)
        finally:
            self._built = {}
            self.constructed_objects = {}
            self.recursive_objects = {}
            self.state_generators = []
            self.deep_construct = False

    def _build(self, node: Any) -> Any:
        cls, tag = type(node), node.tag
        if cls is ScalarNode:
            return node.value if tag == _STR else self.construct_object(node, deep=True)
        found = self._built.get(id(node), self)
        if found is not self:  # an alias of a node already built (or being built)
            return found
        if cls is SequenceNode and tag == _SEQ:
            items: list[Any] = []
            self._built[id(node)] = items
            items.extend(self._build(child) for child in node.value)
            return items
        if cls is MappingNode and tag == _MAP and not any(k.tag in _SPECIAL_KEYS for k, _ in node.value):
            mapping: dict[Any, Any] = {}
            self._built[id(node)] = mapping
            for key_node, value_node in node.value:
                key = self._build(key_node)
                try:
                    hash(key)
                except TypeError:
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           "found unhashable key", key_node.start_mark) from None
                mapping[key] = self._build(value_node)
            return mapping
        built = self.construct_object(node, deep=True)
        self._built[id(node)] = built
        return built


class _Unusual(Exception):
    """Something the event builder leaves to FastSafeLoader (explicit tags, merge keys...)."""


_PLAIN_TAGS = {_STR, "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null",
               "tag:yaml.org,2002:float"}


def _from_events(text: str) -> list[Any]:
    """Documents built straight from libyaml's events, without the node graph: scalars resolved as
    SafeLoader resolves them (remembered per value and style) and constructed by SafeLoader's own
    constructors. Raises _Unusual for anything beyond maps, lists and plain scalars."""
    loader = FastSafeLoader(text)
    try:
        constructors = loader.yaml_constructors
        docs: list[Any] = []
        stack: list[Any] = []      # open containers; a dict carries its pending key next to it
        keys: list[Any] = []
        anchors: dict[str, Any] = {}
        root: list[Any] = []

        def add(value: Any) -> None:
            if not stack:
                root.append(value)
                return
            top = stack[-1]
            if type(top) is list:
                top.append(value)
            elif keys[-1] is _NO_KEY:
                try:
                    hash(value)
                except TypeError:
                    raise _Unusual from None
                keys[-1] = value
            else:
                top[keys[-1]] = value
                keys[-1] = _NO_KEY

        get_event = loader.get_event
        while loader.check_event():
            event = get_event()
            kind = type(event)
            if kind is yaml.ScalarEvent:
                tag = event.tag
                if tag is None or tag == "!":
                    tag = loader.resolve(ScalarNode, event.value, event.implicit)
                if tag == _STR:
                    value = event.value
                elif tag in _PLAIN_TAGS:
                    value = constructors[tag](loader, ScalarNode(tag, event.value))
                else:
                    raise _Unusual
                if event.anchor:
                    anchors[event.anchor] = value
                add(value)
            elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
                if event.tag not in (None, "!"):
                    raise _Unusual
                container: Any = {} if kind is yaml.MappingStartEvent else []
                if event.anchor:
                    anchors[event.anchor] = container
                add(container)
                stack.append(container)
                keys.append(_NO_KEY)
            elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
                stack.pop()
                keys.pop()
            elif kind is yaml.AliasEvent:
                if event.anchor not in anchors:
                    raise _Unusual  # let the loader word the error
                add(anchors[event.anchor])
            elif kind is yaml.DocumentEndEvent:
                docs.append(root[0] if root else None)
                root.clear()
                anchors.clear()
        return docs
    finally:
        loader.dispose()


_NO_KEY = object()


def load_all(text: str) -> list[Any]:
    """Every document of a YAML stream, as yaml.safe_load_all gives them."""
    if HAS_LIBYAML:
        try:
            docs = _from_events(text)
        except _Unusual:  # explicit tags, merge keys, complex keys: rare, take the long way
            pass
        else:
            return docs
    return list(yaml.load_all(text, Loader=FastSafeLoader))
