"""The allocator's view of ResourceSlices, DeviceClasses and ResourceClaims (resource.k8s.io/v1).

Objects arrive as plain dicts in the API's JSON shape (camelCase, as kubectl prints them); this
module reads each once into small dataclasses the search works on, and raises `ModelError`
naming the object and the field when something required is missing or malformed.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celpy import celtypes

from driver.allocator import cel
from driver.allocator import quantity as q

# resource.k8s.io/v1: AllocationResultsMaxSize.
MAX_RESULTS = 32
_UID_NAMESPACE = uuid.UUID("6b1d4c9e-2f0a-4e55-9d3c-63617276652e")


class ModelError(ValueError):
    """An object that does not have the shape of its kind."""


def _field(obj: Mapping[str, Any], name: str, what: str, kind: type = dict) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind):
        raise ModelError(f"{what}: {name} is missing or not a {kind.__name__}")
    return value


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's metadata for naming it; anything but a map (bad input) names nothing."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def object_name(obj: Mapping[str, Any]) -> str:
    meta = _metadata(obj)
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name', '?')}" if ns else str(meta.get("name", "?"))


def claim_uid(claim: Mapping[str, Any]) -> str:
    """metadata.uid, or a UUID derived from namespace/name so runs are reproducible."""
    meta = claim.get("metadata") or {}
    uid = meta.get("uid")
    if uid:
        return str(uid)
    return str(uuid.uuid5(_UID_NAMESPACE, f"{meta.get('namespace', '')}/{meta.get('name', '')}"))


def share_id(uid: str, index: int) -> str:
    """Deterministic stand-in for the scheduler's random share UUID: same claim, same IDs."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"share/{uid}/{index}"))


# --- slices --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CapacitySpec:
    value: int
    default: int | None = None
    valid_values: tuple[int, ...] = ()
    range_min: int | None = None
    range_max: int | None = None
    range_step: int | None = None
    fmt: q.Format = "BinarySI"


def _capacity(raw: Mapping[str, Any], what: str) -> CapacitySpec:
    # The devices of a cluster repeat the same few capacities: read each distinct one once
    # (by its repr, which tells apart "1" and 1 as the format needs).
    key = repr(raw)
    found = _CAPACITIES.get(key)
    if found is None:
        found = _read_capacity(raw, what)
        if len(_CAPACITIES) < 65536:
            _CAPACITIES[key] = found
    return found


_CAPACITIES: dict[str, CapacitySpec] = {}


def _read_capacity(raw: Mapping[str, Any], what: str) -> CapacitySpec:
    try:
        value = q.of(raw["value"])
        policy = raw.get("requestPolicy")
        if not policy:
            return CapacitySpec(q.units(value), fmt=value.format)
        rng = policy.get("validRange") or {}

        def opt(v: Any) -> int | None:
            return None if v is None else q.units(v)

        return CapacitySpec(
            q.units(value), opt(policy.get("default")),
            tuple(q.units(v) for v in policy.get("validValues") or ()),
            opt(rng.get("min")), opt(rng.get("max")), opt(rng.get("step")), value.format)
    except (KeyError, TypeError, q.QuantityError) as e:
        raise ModelError(f"{what}: {e}") from None


@dataclass(eq=False, slots=True)
class Device:
    """One device of one slice, with everything the search needs precomputed."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_name: str
    index: int                                  # position in its slice
    node_name: str | None                       # from the slice, or the device (perDeviceNodeSelection)
    node_selector: dict | None
    attributes: dict[str, Any]
    capacity: dict[str, CapacitySpec]
    allow_multiple: bool
    consumes: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    taints: tuple[dict, ...]
    binds_to_node: bool
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    key: tuple[str, str, str] = ("", "", "")
    cel_key: tuple[str, str, int, str] = ("", "", 0, "")
    _cel: celtypes.MapType | None = None
    raw_capacity: dict[str, Any] = field(default_factory=dict)
    _qualified: tuple[dict, dict] | None = None
    input_keys: dict = field(default_factory=dict)  # cel_cache.input_key's, per interned read set
    consumption_memo: dict = field(default_factory=dict)  # capacity.consumption's, per request amounts

    def cel_value(self) -> celtypes.MapType:
        if self._cel is None:
            self._cel = cel.device_value(self.driver, self.attributes, self.raw_capacity, self.allow_multiple)
        return self._cel

    def qualified(self) -> tuple[dict[tuple[str, str], Any], dict[tuple[str, str], Any]]:
        """Raw attributes and capacities by (domain, id), as selectors see them."""
        if self._qualified is None:
            self._qualified = (cel.qualify(self.attributes, self.driver),
                               cel.qualify(self.raw_capacity, self.driver))
        return self._qualified

    def attribute(self, qualified: str) -> Any:
        """matchAttribute/distinctAttribute lookup: full name, or the bare id in the driver's domain."""
        if qualified in self.attributes:
            return self.attributes[qualified]
        domain, _, ident = qualified.rpartition("/")
        if domain == self.driver and ident in self.attributes:
            return self.attributes[ident]
        return None


@dataclass(slots=True)
class Slice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str | None
    node_selector: dict | None
    all_nodes: bool
    per_device: bool
    devices: list[Device]
    counter_sets: dict[str, dict[str, int]]


def read_slice(obj: Mapping[str, Any]) -> Slice:
    name = _metadata(obj).get("name") or "?"
    what = f"ResourceSlice {name}"
    spec = _field(obj, "spec", what)
    driver = _field(spec, "driver", what, str)
    pool = _field(spec, "pool", f"{what}: spec")
    pool_name = _field(pool, "name", f"{what}: spec.pool", str)
    generation = int(pool.get("generation", 0))
    count = int(pool.get("resourceSliceCount", 1))
    per_device = bool(spec.get("perDeviceNodeSelection"))
    counter_sets: dict[str, dict[str, int]] = {}
    for i, cs in enumerate(spec.get("sharedCounters") or ()):
        try:
            counters = (cs.get("counters") or {}).items()
            counter_sets[cs["name"]] = {c: q.units(v["value"]) for c, v in counters}
        except (KeyError, TypeError, q.QuantityError) as e:
            raise ModelError(f"{what}: spec.sharedCounters[{i}]: {e}") from None
    s = Slice(name, driver, pool_name, generation, count, spec.get("nodeName") or None,
              spec.get("nodeSelector"), bool(spec.get("allNodes")), per_device, [], counter_sets)
    for i, d in enumerate(spec.get("devices") or ()):
        s.devices.append(_read_device(d, s, i, f"{what}: spec.devices[{i}]"))
    return s


def _check_attributes(attributes: Any, what: str) -> None:
    """Every attribute must have a value selectors can read: checked here, once, so that a bad one
    fails the slice whether or not a cached selector result spares reading it later."""
    if not isinstance(attributes, Mapping):
        raise ModelError(f"{what}: attributes is not a map")
    for name, raw in attributes.items():
        try:
            _attribute_ok(raw)
        except (ValueError, TypeError) as e:
            raise ModelError(f"{what}.attributes[{name}]: {e}") from None


def _attribute_ok(raw: Any) -> None:
    # The usual well-typed values are accepted without building CEL values (10,000s per cluster);
    # anything else goes through cel.attribute_value, which decides in the same order.
    if isinstance(raw, Mapping):
        if "int" in raw:
            v = raw["int"]
            if type(v) is int and q.INT64_MIN <= v <= q.INT64_MAX:
                return
        elif "bool" in raw:
            if type(raw["bool"]) is bool:
                return
        elif "string" in raw:
            if type(raw["string"]) is str:
                return
        elif "version" in raw and type(raw["version"]) is str:
            _version_ok(raw["version"])
            return
    else:
        raise TypeError(f"expected a map with int, bool, string or version, got {type(raw).__name__}")
    cel.attribute_value(raw)


@functools.lru_cache(maxsize=4096)
def _version_ok(text: str) -> None:
    cel.attribute_value({"version": text})


def _read_device(d: Mapping[str, Any], s: Slice, index: int, what: str) -> Device:
    name = _field(d, "name", what, str)
    attributes = d.get("attributes") or {}
    _check_attributes(attributes, what)
    raw_capacity = d.get("capacity") or {}
    capacity = {n: _capacity(c, f"{what}.capacity[{n}]") for n, c in raw_capacity.items()}
    consumes = []
    for j, cc in enumerate(d.get("consumesCounters") or ()):
        try:
            counters = tuple((c, q.units(v["value"])) for c, v in (cc.get("counters") or {}).items())
            consumes.append((cc["counterSet"], counters))
        except (KeyError, TypeError, q.QuantityError) as e:
            raise ModelError(f"{what}.consumesCounters[{j}]: {e}") from None
    node_name, node_selector = s.node_name, s.node_selector
    if s.per_device:
        node_name, node_selector = d.get("nodeName") or None, d.get("nodeSelector")
    dev = Device(
        name=name, driver=s.driver, pool=s.pool, generation=s.generation, slice_name=s.name, index=index,
        node_name=node_name, node_selector=node_selector, attributes=attributes, capacity=capacity,
        allow_multiple=bool(d.get("allowMultipleAllocations")), consumes=tuple(consumes),
        taints=tuple(d.get("taints") or ()), binds_to_node=bool(d.get("bindsToNode")),
        binding_conditions=tuple(d.get("bindingConditions") or ()),
        binding_failure_conditions=tuple(d.get("bindingFailureConditions") or ()),
        raw_capacity=raw_capacity)
    dev.key = (s.driver, s.pool, name)
    dev.cel_key = (s.driver, s.pool, s.generation, name)
    return dev


# --- classes -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]
    config: tuple[dict, ...]


def read_class(obj: Mapping[str, Any]) -> DeviceClass:
    name = _metadata(obj).get("name")
    if not name or not isinstance(name, str):
        raise ModelError("DeviceClass: metadata.name is missing")
    spec = _map(obj.get("spec"), f"DeviceClass {name}: spec")
    config = tuple(_list(spec.get("config"), f"DeviceClass {name}: spec.config"))
    for i, entry in enumerate(config):
        _map(entry, f"DeviceClass {name}: spec.config[{i}]")
    return DeviceClass(name, _selectors(spec.get("selectors"), f"DeviceClass {name}: spec"), config)


def _map(value: Any, where: str) -> Mapping[str, Any]:
    """An optional object field: absent is empty, anything but a map is the object's error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{where}: expected an object, got {type(value).__name__} {_brief(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    """An optional list field: absent is empty, anything but a list is the object's error."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ModelError(f"{where}: expected a list, got {type(value).__name__} {_brief(value)}")
    return list(value)


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _selectors(raw: Any, what: str) -> tuple[str, ...]:
    out = []
    for i, s in enumerate(_list(raw, f"{what}.selectors")):
        cel_field = s.get("cel") if isinstance(s, Mapping) else None
        expr = cel_field.get("expression") if isinstance(cel_field, Mapping) else None
        if not isinstance(expr, str):
            raise ModelError(f"{what}.selectors[{i}]: cel.expression is missing")
        out.append(expr)
    return tuple(out)


# --- claims --------------------------------------------------------------------------------------

@dataclass(unsafe_hash=True, slots=True)  # a value: never changed after read_claim builds it
class Request:
    """A request with `exactly`, or one subrequest of `firstAvailable`."""

    name: str                 # as it appears in results: "req" or "req/sub"
    base: str                 # the top-level request name
    sub: str | None
    class_name: str
    selectors: tuple[str, ...]
    all_devices: bool
    count: int
    admin: bool
    tolerations: tuple[dict, ...]
    capacity: tuple[tuple[str, int], ...] | None


@dataclass(unsafe_hash=True, slots=True)  # a value: never changed after read_claim builds it
class Constraint:
    requests: frozenset[str]
    attribute: str
    distinct: bool

    def applies(self, request: Request) -> bool:
        return not self.requests or request.base in self.requests or request.name in self.requests


@dataclass(unsafe_hash=True, slots=True)  # a value: never changed after read_claim builds it
class Claim:
    uid: str
    name: str                 # namespace/name, for messages
    requests: tuple[tuple[Request, ...], ...]   # per top-level request: its alternatives in order
    constraints: tuple[Constraint, ...]
    config: tuple[dict, ...]


def _request(raw: Mapping[str, Any], base: str, sub: str | None, what: str, admin_ok: bool) -> Request:
    cls = raw.get("deviceClassName")
    if not isinstance(cls, str) or not cls:
        raise ModelError(f"{what}: deviceClassName is missing")
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise ModelError(f"{what}: allocationMode {mode!r} is not ExactCount or All")
    if mode == "All" and raw.get("count") is not None:
        raise ModelError(f"{what}: count must not be set with allocationMode All")
    count = raw.get("count", 1) if mode == "ExactCount" else 0
    if not isinstance(count, int) or isinstance(count, bool):
        raise ModelError(f"{what}: count: expected an integer, got {type(count).__name__} {_brief(count)}")
    if mode == "ExactCount" and count < 1:
        raise ModelError(f"{what}: count must be at least 1")
    caps = None
    asked = _map(_map(raw.get("capacity"), f"{what}: capacity").get("requests"), f"{what}: capacity.requests")
    if asked:
        try:
            caps = tuple((str(n), q.units(v)) for n, v in asked.items())
        except (q.QuantityError, TypeError, ValueError) as e:
            raise ModelError(f"{what}: capacity.requests: {e}") from None
        for n, units in caps:
            if units < 0:  # it would give capacity back to the device (the API server refuses it too)
                raise ModelError(f"{what}: capacity.requests.{n}: {asked[n]!r} is negative")
    tolerations = _list(raw.get("tolerations"), f"{what}: tolerations")
    for i, t in enumerate(tolerations):
        _map(t, f"{what}: tolerations[{i}]")
    return Request(
        name=f"{base}/{sub}" if sub else base, base=base, sub=sub, class_name=cls,
        selectors=_selectors(raw.get("selectors"), what), all_devices=mode == "All", count=count,
        admin=bool(raw.get("adminAccess")) and admin_ok, tolerations=tuple(tolerations), capacity=caps)


def read_claim(obj: Mapping[str, Any]) -> Claim:
    name = object_name(obj)
    what = f"ResourceClaim {name}"
    devices = _map(_map(obj.get("spec"), f"{what}: spec").get("devices"), f"{what}: spec.devices")
    requests = []
    for i, r in enumerate(_list(devices.get("requests"), f"{what}: spec.devices.requests")):
        r = _map(r, f"{what}: spec.devices.requests[{i}]")
        rname = r.get("name")
        if not isinstance(rname, str) or not rname:
            raise ModelError(f"{what}: spec.devices.requests[{i}].name is missing")
        if any(rname == alts[0].base for alts in requests):
            raise ModelError(f"{what}: spec.devices.requests[{i}]: request name {rname} is used twice")
        if r.get("exactly") and r.get("firstAvailable"):
            raise ModelError(f"{what}: request {rname}: exactly and firstAvailable are both set")
        if r.get("exactly"):
            exactly = _map(r["exactly"], f"{what}: spec.devices.requests[{i}].exactly")
            requests.append((_request(exactly, rname, None, f"{what}: request {rname}", True),))
        elif r.get("firstAvailable"):
            alts = []
            where = f"{what}: spec.devices.requests[{i}].firstAvailable"
            for j, s in enumerate(_list(r["firstAvailable"], where)):
                s = _map(s, f"{where}[{j}]")
                sname = s.get("name")
                if not isinstance(sname, str) or not sname:
                    raise ModelError(f"{what}: request {rname}: firstAvailable[{j}].name is missing")
                alts.append(_request(s, rname, sname, f"{what}: request {rname}/{sname}", False))
            requests.append(tuple(alts))
        elif r.get("deviceClassName"):  # v1beta1 shape, still accepted for convenience
            requests.append((_request(r, rname, None, f"{what}: request {rname}", True),))
        else:
            raise ModelError(f"{what}: request {rname}: neither exactly nor firstAvailable is set")
    constraints = []
    known = {n for alts in requests for r in alts for n in (r.base, r.name)}
    for i, c in enumerate(_list(devices.get("constraints"), f"{what}: spec.devices.constraints")):
        where = f"{what}: spec.devices.constraints[{i}]"
        c = _map(c, where)
        if bool(c.get("matchAttribute")) == bool(c.get("distinctAttribute")):
            raise ModelError(f"{where}: set exactly one of matchAttribute, distinctAttribute")
        key = "matchAttribute" if c.get("matchAttribute") else "distinctAttribute"
        attribute = c[key]
        if not isinstance(attribute, str):
            raise ModelError(f"{where}.{key}: expected a qualified attribute name, got "
                             f"{type(attribute).__name__} {_brief(attribute)}")
        names = _list(c.get("requests"), f"{where}.requests")
        if not all(isinstance(n, str) for n in names):
            raise ModelError(f"{where}.requests: expected a list of request names")
        unknown = sorted(set(names) - known)
        if unknown:
            raise ModelError(f"{where}.requests: {', '.join(unknown)} is not a request of the claim")
        constraints.append(Constraint(frozenset(names), attribute, key == "distinctAttribute"))
    config = tuple(_list(devices.get("config"), f"{what}: spec.devices.config"))
    for i, entry in enumerate(config):
        _map(entry, f"{what}: spec.devices.config[{i}]")
    return Claim(claim_uid(obj), name, tuple(requests), tuple(constraints), config)
