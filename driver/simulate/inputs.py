"""The files `carve simulate` reads: cluster.yaml and trace.yaml, checked with pydantic at the boundary.

Everything past this module works on plain dataclasses (`NodeGroup`, `TracePod`); a mistake in a file
becomes one `SimulateError` naming the file and the field (`trace.yaml: pods[3].duration: ...`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from driver import names
from driver.allocator.model import ModelError, read_claim
from driver.allocator.quantity import QuantityError
from driver.allocator.quantity import of as quantity_of
from driver.cluster.decode import MAX_DEPTH, too_deep
from driver.errors import not_text, yaml_error

STRATEGY_NAMES = (
    names.STRATEGY_EXCLUSIVE,
    names.STRATEGY_SOFT,
    names.STRATEGY_SLOTS,
    names.STRATEGY_MIG,
    names.STRATEGY_TIMESLICE,
    names.STRATEGY_MPS,
)
GENERATOR_KINDS = ("inference-mix", "inference", "notebook", "training")
# A node's GPUs, at most: the largest servers carry 16; this bounds the work a typo (8000xA100) makes.
MAX_GPUS_PER_NODE = 64
# Seconds, at most, for any time in a trace (arrival, duration, mean interarrival): ten years.
MAX_SECONDS = 10 * 365 * 86400.0
_GPUS_ITEM = re.compile(r"^\s*(\d+)\s*x\s*([A-Za-z0-9][A-Za-z0-9-]*)\s*$")


class SimulateError(Exception):
    """Bad simulation input; the message names the file and the field."""


# ---- internal values -------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeGroup:
    """`count` identical nodes: GPU models in order, and the strategy asked for (None: not given)."""

    name: str
    count: int
    models: tuple[str, ...]  # one catalog key per GPU, e.g. ("A100-80GB",) * 8
    strategy: str | None
    # One strategy per GPU, in `models` order, where the GPUs of a node differ (auto's search of mixed
    # layouts, portfolio.py); `strategy` then only names the mix ("2xmig+2xsoft").
    gpu_strategies: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Demand:
    """What a pod really needs, summed over its claims: bytes of GPU memory and percent of one GPU's SMs."""

    memory: int = 0
    cores: float = 0.0

    def __add__(self, other: Demand) -> Demand:
        return Demand(self.memory + other.memory, self.cores + other.cores)


@dataclass(frozen=True)
class TracePod:
    """One pod of a trace: arrives at `arrival` s, runs `duration` s once placed, holds `claims`."""

    name: str
    arrival: float
    duration: float
    claims: tuple[dict[str, Any], ...]  # ResourceClaim specs ({"devices": {...}})
    demand: Demand | None = None  # None: derived from the claims (driver.simulate.demand)
    kind: str = field(default="", compare=False)  # generator class (inference, notebook, training)


# ---- file models -----------------------------------------------------------------------------------


class _Strict(BaseModel):
    # inf and nan are numbers to YAML (.inf, .nan) and to Python's float(), never a time or an amount here.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NodeGroupModel(_Strict):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    count: int = Field(default=1, ge=1, le=10_000)
    gpus: str = Field(min_length=1, description='"8xA100-80GB" or "4xA100-80GB,4xT4"')
    strategy: Literal["auto", "exclusive", "soft", "slots", "mig", "timeslice"] | None = None

    @field_validator("gpus")
    @classmethod
    def _gpus_syntax(cls, value: str) -> str:
        total = 0
        for item in value.split(","):
            m = _GPUS_ITEM.match(item)
            if not m or int(m.group(1)) < 1:
                raise ValueError(f"{item.strip()!r} is not <count>x<model>, e.g. 8xA100-80GB")
            total += int(m.group(1))
            if total > MAX_GPUS_PER_NODE:
                raise ValueError(f"more than {MAX_GPUS_PER_NODE} GPUs on one node ({value.strip()!r})")
        return value


def _refuse_repeats(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} name {name!r} is used twice")
        seen.add(name)


class ClusterModel(_Strict):
    nodes: list[NodeGroupModel] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> ClusterModel:
        _refuse_repeats("node", [group.name for group in self.nodes])
        return self


class DemandModel(_Strict):
    memory: str | int = 0
    cores: float = Field(default=0, ge=0)

    @field_validator("memory")
    @classmethod
    def _memory_quantity(cls, value: str | int) -> str | int:
        try:
            q = quantity_of(value)
        except QuantityError as e:
            raise ValueError(str(e)) from None
        if q.value < 0:
            raise ValueError("must not be negative")
        return value


class PodModel(_Strict):
    name: str = Field(min_length=1, max_length=253)
    arrival: float = Field(ge=0, le=MAX_SECONDS)
    duration: float = Field(gt=0, le=MAX_SECONDS)
    claims: list[dict[str, Any]] = Field(min_length=1, max_length=32)
    demand: DemandModel | None = None

    @field_validator("claims")
    @classmethod
    def _claim_shape(cls, claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # Only the outline is checked here; the allocator reports anything deeper with the request name.
        for i, spec in enumerate(claims):
            requests = (spec.get("devices") or {}).get("requests") if isinstance(spec, dict) else None
            if not isinstance(requests, list) or not requests:
                raise ValueError(f"claims[{i}]: a ResourceClaim spec needs devices.requests "
                                 "(a non-empty list)")
            for j, req in enumerate(requests):
                if not isinstance(req, dict) or not req.get("name"):
                    raise ValueError(f"claims[{i}].devices.requests[{j}]: needs a name")
                if ("exactly" in req) == ("firstAvailable" in req):
                    raise ValueError(f"claims[{i}].devices.requests[{j}]: needs exactly one of "
                                     "exactly, firstAvailable")
                _check_capacities(f"claims[{i}].devices.requests[{j}]", req)
        return claims


def _check_capacities(where: str, request: dict[str, Any]) -> None:
    """Every capacity a request asks for is a Kubernetes quantity (`4Gi`, not `4GB`), named by its field."""
    alternatives = [("exactly", request.get("exactly"))]
    subs = request.get("firstAvailable")
    if isinstance(subs, list):
        alternatives += [(f"firstAvailable[{k}]", s) for k, s in enumerate(subs)]
    for field_name, alt in alternatives:
        asked = ((alt.get("capacity") or {}).get("requests") if isinstance(alt, dict) else None) or {}
        if not isinstance(asked, dict):
            continue
        for key, value in asked.items():
            try:
                quantity_of(value)
            except QuantityError as e:
                raise ValueError(f"{where}.{field_name}.capacity.requests.{key}: {e}") from None


class GenerateModel(_Strict):
    kind: Literal["inference-mix", "inference", "notebook", "training"] = "inference-mix"
    pods: int = Field(ge=1, le=1_000_000)
    seed: int = 0
    interarrival_s: float = Field(
        default=30.0, gt=0, le=MAX_SECONDS, description="mean seconds between arrivals"
    )


class TraceModel(_Strict):
    pods: list[PodModel] | None = None
    generate: GenerateModel | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TraceModel:
        if (self.pods is None) == (self.generate is None):
            raise ValueError("give exactly one of pods, generate")
        if self.pods is not None:
            _refuse_repeats("pod", [pod.name for pod in self.pods])
        return self


# ---- loading ---------------------------------------------------------------------------------------


def _where(loc: tuple[int | str, ...]) -> str:
    """('pods', 3, 'duration') -> 'pods[3].duration'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _validation_message(label: str, error: ValidationError) -> str:
    first = error.errors()[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    msg = first["msg"].removeprefix("Value error, ")
    return f"{label}: {_where(loc)}: {msg}{more}"


def _read_yaml(path: Path) -> tuple[str, Any]:
    label = path.name
    try:
        text = path.read_text()
    except OSError as e:
        raise SimulateError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SimulateError(not_text(label, e)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SimulateError(yaml_error(label, e)) from None
    except RecursionError:  # PyYAML's composer recurses per nesting level
        raise SimulateError(f"{label}: nested deeper than {MAX_DEPTH} levels") from None
    deep = too_deep(data)
    if deep is not None:
        raise SimulateError(f"{label}: {deep.lstrip('.')[:120]}: nested deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict):
        raise SimulateError(f"{label}: expected a mapping at the top level, got {type(data).__name__}")
    return label, data


def parse_gpus(text: str) -> tuple[str, ...]:
    """'4xA100-80GB,2xT4' -> ('A100-80GB',)*4 + ('T4',)*2 (syntax already checked by the model)."""
    models: list[str] = []
    for item in text.split(","):
        m = _GPUS_ITEM.match(item)
        assert m, item
        models += [m.group(2)] * int(m.group(1))
    return tuple(models)


def cluster_from_data(data: dict[str, Any], label: str = "cluster.yaml") -> list[NodeGroup]:
    try:
        model = ClusterModel.model_validate(data)
    except ValidationError as e:
        raise SimulateError(_validation_message(label, e)) from None
    return [
        NodeGroup(
            name=g.name,
            count=g.count,
            models=parse_gpus(g.gpus),
            strategy=None if g.strategy in (None, "auto") else g.strategy,
        )
        for g in model.nodes
    ]


def load_cluster(path: Path) -> list[NodeGroup]:
    label, data = _read_yaml(Path(path))
    return cluster_from_data(data, label)


def _demand(model: DemandModel | None) -> Demand | None:
    if model is None:
        return None
    return Demand(memory=int(quantity_of(model.memory).value), cores=float(model.cores))


def trace_from_data(data: dict[str, Any], label: str = "trace.yaml") -> list[TracePod] | GenerateModel:
    """The pods of a trace, or the generator settings when the trace asks for generated pods."""
    try:
        model = TraceModel.model_validate(data)
    except ValidationError as e:
        raise SimulateError(_validation_message(label, e)) from None
    if model.generate is not None:
        return model.generate
    assert model.pods is not None
    for i, p in enumerate(model.pods):
        for j, spec in enumerate(p.claims):
            # The allocator's own reader, once, here: a claim of the wrong shape is this file's error,
            # named by pod and field, before the planner or the allocator reads it raw.
            try:
                read_claim({"metadata": {"name": p.name}, "spec": spec})
            except ModelError as e:
                detail = str(e).removeprefix(f"ResourceClaim {p.name}: ").replace("spec.", "", 1)
                raise SimulateError(f"{label}: pods[{i}] ({p.name}): claims[{j}]: {detail}") from None
    return [
        TracePod(
            name=p.name,
            arrival=p.arrival,
            duration=p.duration,
            claims=tuple(p.claims),
            demand=_demand(p.demand),
        )
        for p in model.pods
    ]


def load_trace(path: Path) -> list[TracePod] | GenerateModel:
    label, data = _read_yaml(Path(path))
    return trace_from_data(data, label)
