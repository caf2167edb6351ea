"""Selector results, evaluated once per distinct input and cached per Allocator.

A selector's result depends only on what it reads from the device (cel_ast.reads): the driver,
some attributes and capacities, a domain's map. The cache key is the expression and the raw values
of those reads, so the thousands of devices of a cluster that agree on them (every MIG 1g.10gb
instance, every soft-sliced A100) share one evaluation. An expression that may read anything is
keyed by the device itself and its pool generation. On a miss the fast path answers (cel_fast);
when it defers, cel-python does. Errors are results too: cached as the CelError to raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from celpy import celtypes

from driver.allocator import cel, cel_fast
from driver.allocator import quantity as q
from driver.allocator.cel_ast import Read

if TYPE_CHECKING:
    from driver.allocator.model import Device

_MISSING = ("missing",)


def _frozen(raw: Any) -> Any:
    """A hashable stand-in for a raw attribute ({"string": "mig"}); equal only when equal."""
    if isinstance(raw, dict):
        try:
            items = tuple(raw.items())
            hash(items)
            return items
        except TypeError:
            return ("repr", repr(raw))
    return ("raw", type(raw).__name__, repr(raw))


def _capacity_key(raw: Any) -> Any:
    value = raw.get("value") if isinstance(raw, dict) else raw
    return (type(value).__name__, value if isinstance(value, (str, int, float)) else repr(value))


def _raw(names: dict[str, Any], qualified: int, dev: Device, r: Read) -> Any:
    """names[domain/name] as selectors see it (a bare name is in the driver's domain), without
    qualifying every name of the device: only when both spellings exist, or the name has a "/",
    does the device's qualified map decide."""
    domain, name = r.domain, r.name
    if "/" in name:
        return dev.qualified()[qualified].get((domain, name), _MISSING)
    if domain == dev.driver and name in names:
        return dev.qualified()[qualified][(domain, name)] if r.qualified in names else names[name]
    return names.get(r.qualified, _MISSING)


def input_key(reads: tuple[Read, ...], dev: Device, reads_id: int = -1) -> tuple:
    """The values of `reads` on `dev` (what the selector's result depends on); remembered on the
    device per read set when `reads_id` (cel_ast.read_set_id) is given."""
    if reads_id >= 0:
        found = dev.input_keys.get(reads_id)
        if found is None:
            found = dev.input_keys[reads_id] = input_key(reads, dev)
        return found
    out: list[Any] = []
    for r in reads:
        kind = r.kind
        if kind == "attr":
            raw = _raw(dev.attributes, 0, dev, r)
            out.append(_frozen(raw))  # _MISSING's key: a tuple's, which no JSON value has
        elif kind == "cap":
            raw = _raw(dev.raw_capacity, 1, dev, r)
            out.append(_capacity_key(raw))
        elif kind == "driver":
            out.append(dev.driver)
        elif kind == "multi":
            out.append(dev.allow_multiple)
        else:  # a whole domain map, in its order
            attrs, caps = dev.qualified()
            source = attrs if r.map_kind == "attr" else caps
            freeze = _frozen if r.map_kind == "attr" else _capacity_key
            out.append(tuple((n, freeze(v)) for (d, n), v in source.items() if d == r.domain))
    return tuple(out)


class DeviceInputs:
    """What a fast-path closure reads from one device, converted on demand."""

    __slots__ = ("_attrs", "_caps", "allow_multiple", "driver")

    def __init__(self, dev: Device) -> None:
        self._attrs, self._caps = dev.qualified()
        self.driver = celtypes.StringType(dev.driver)
        self.allow_multiple = celtypes.BoolType(dev.allow_multiple)

    def attribute(self, domain: str, name: str) -> Any:
        raw = self._attrs.get((domain, name))
        return cel_fast.ERROR if raw is None else cel.attribute_value(raw)

    def capacity(self, domain: str, name: str) -> Any:
        raw = self._caps.get((domain, name))
        return cel_fast.ERROR if raw is None else q.of(raw["value"])

    def domain(self, map_kind: str, domain: str) -> set[str]:
        source = self._attrs if map_kind == "attr" else self._caps
        return {n for (d, n) in source if d == domain}


def decide(program: cel.Program, dev: Device, fast: bool = True) -> tuple[bool, bool]:
    """(the selector's result on one device, whether the fast path gave it); cel-python answers
    when the fast path defers or does not cover the expression."""
    if fast and program.fast is not None:
        try:
            return program.fast(DeviceInputs(dev)), True
        except cel_fast.Defer:
            pass
    return program.evaluate(dev.cel_value()), False


class SelectorCache:
    """Selector results per (expression, input key). One per Allocator.

    Writes are single dict assignments, safe under the GIL; a race evaluates an expression twice
    and stores the same answer.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._results: dict[tuple, bool | cel.CelError] = {}
        self.hits = 0
        self.misses = 0
        self.evaluations = 0
        self.fast_answers = 0

    def matches(self, expression: str, dev: Device) -> bool:
        """Whether `dev` matches; raises CelError (compile or runtime) naming the expression."""
        program = cel.compile_selector(expression)
        key: tuple | None = None
        if self.enabled:
            if program.reads is None:
                key = (expression, "device", dev.cel_key)
            else:
                key = (expression, "inputs", input_key(program.reads, dev, program.reads_id))
            found = self._results.get(key)
            if found is not None:
                self.hits += 1
                if isinstance(found, cel.CelError):
                    raise found
                return found
            self.misses += 1
        self.evaluations += 1
        result: bool | cel.CelError
        try:
            result, by_fast_path = decide(program, dev, cel.Runners.fast)
            self.fast_answers += by_fast_path
        except cel.CelError as e:
            result = e
        if key is not None:
            self._results[key] = result
        if isinstance(result, cel.CelError):
            raise result
        return result

    def forget(self, keep: Callable[[tuple[str, str, int, str]], bool]) -> None:
        """Drop results keyed by a device (expressions that may read anything) that `keep` rejects,
        e.g. of an older pool generation; results keyed by input values stay true forever."""
        self._results = {k: v for k, v in self._results.items() if k[1] != "device" or keep(k[2])}

    def __len__(self) -> int:
        return len(self._results)
