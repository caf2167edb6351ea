"""The strategy controller's API (`carve.dev/v1alpha1`): NodePartitioning and PartitioningPolicy.

NodePartitioning (cluster-scoped, one per node, named after the node): `spec` is written by the
controller (which strategy each GPU should run), `status` by that node's kubelet plugin only (what it
applied, what waits for an idle GPU). PartitioningPolicy (cluster-scoped) bounds what the controller may
choose: allowed strategies and the default per node selector, namespaces that must get hardware
isolation, and the hysteresis that keeps GPUs from flapping.

The CRDs in helm/carve/crds/ carry the same rules as OpenAPI schema plus CEL (x-kubernetes-validations);
these models are what carve itself parses, strictly, with errors naming the object and the field.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from driver import names

KIND_NODE_PARTITIONING = "NodePartitioning"
KIND_PARTITIONING_POLICY = "PartitioningPolicy"
API_VERSION = f"{names.CRD_GROUP}/{names.CRD_VERSION}"
PLURAL_NODE_PARTITIONINGS = "nodepartitionings"
PLURAL_PARTITIONING_POLICIES = "partitioningpolicies"
# Annotation on a NodePartitioning where the controller keeps when it changed each GPU (hysteresis).
ANNOTATION_CHANGES = f"{names.CRD_GROUP}/strategy-changes"
# Why the controller last changed each GPU it manages ({"<index>": reason with the winning score}), for
# `kubectl carve status -o wide`; bounded: one entry per GPU, each cut to REASON_MAX characters.
ANNOTATION_REASONS = f"{names.CRD_GROUP}/strategy-reasons"
REASON_MAX = 512

StrategyName = Literal["exclusive", "soft", "slots", "mig", "timeslice", "mps"]
STRATEGY_NAMES: tuple[str, ...] = ("exclusive", "soft", "slots", "mig", "timeslice", "mps")
HARDWARE_ISOLATED: tuple[str, ...] = (names.STRATEGY_MIG, names.STRATEGY_EXCLUSIVE)
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


class PartitioningError(ValueError):
    """A NodePartitioning or PartitioningPolicy carve cannot use; the message names object and field."""


def parse_duration(text: str) -> float:
    """'10m', '1h30m', '45s' -> seconds (the Go duration subset the CRD schema admits)."""
    m = _DURATION.match(text or "")
    if not text or not m or not any(m.groups()):
        raise ValueError(f"{text!r} is not a duration like 10m, 1h30m or 45s")
    h, mi, s = (int(g or 0) for g in m.groups())
    return float(h * 3600 + mi * 60 + s)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class MigSlot(_Strict):
    """One MIG instance of a layout: a profile name and, optionally, its placement start."""

    profile: str = Field(min_length=1, max_length=32, pattern=r"^[0-9]+g\.[0-9]+gb(\+[a-z.]+)?$")
    placement: int | None = Field(default=None, ge=0, le=7)


class GpuPartition(_Strict):
    """The desired strategy of one GPU, named by its index or its UUID."""

    index: int | None = Field(default=None, ge=0, le=63)
    uuid: str | None = Field(default=None, min_length=1, max_length=64)
    strategy: StrategyName
    mig_layout: list[MigSlot] | None = Field(default=None, alias="migLayout", max_length=7)
    split_count: int | None = Field(default=None, alias="splitCount", ge=1, le=100)
    # The admin wrote this entry: the controller never changes or drops it, and it wins over the node's
    # strategy rules (docs/controller.md, "Pinning"). The controller's own entries leave it out (false).
    pinned: bool = False

    @model_validator(mode="after")
    def _named(self) -> GpuPartition:
        if self.index is None and self.uuid is None:
            raise ValueError("one of index or uuid is required")
        if self.mig_layout is not None and self.strategy != names.STRATEGY_MIG:
            raise ValueError(f"migLayout is only valid with strategy mig, not {self.strategy}")
        if self.split_count is not None and self.strategy not in (names.STRATEGY_SOFT, names.STRATEGY_SLOTS):
            raise ValueError(f"splitCount is only valid with strategy soft or slots, not {self.strategy}")
        return self


class NodePartitioningSpec(_Strict):
    gpus: list[GpuPartition] = Field(default_factory=list, max_length=64)
    paused: bool = False

    @model_validator(mode="after")
    def _unique(self) -> NodePartitioningSpec:
        for attr in ("index", "uuid"):
            seen = [getattr(g, attr) for g in self.gpus if getattr(g, attr) is not None]
            if len(seen) != len(set(seen)):
                raise ValueError(f"gpus: a GPU {attr} is named twice")
        return self


class Condition(_Strict):
    type: Literal["Applied", "Degraded"]
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field(default="", max_length=32768)
    last_transition_time: str = Field(alias="lastTransitionTime")
    observed_generation: int | None = Field(default=None, alias="observedGeneration", ge=0)


class GpuStatus(_Strict):
    index: int = Field(ge=0)
    uuid: str = ""
    strategy: StrategyName | None = None  # the published strategy; None while the GPU is not published
    mig_mode: Literal["Enabled", "Disabled", "NotSupported", "ResetRequired"] = Field(alias="migMode")
    pending: str = ""  # why the desired strategy is not applied yet (empty: applied)
    # Who set the strategy: pinned (the admin: a strategy rule naming the GPU, the node annotation, a
    # pinned entry), controller (its entry), fallback (the GPU cannot run what it was given), default.
    source: Literal["pinned", "controller", "fallback", "default"] | None = None


class NodePartitioningStatus(_Strict):
    observed_generation: int | None = Field(default=None, alias="observedGeneration", ge=0)
    gpus: list[GpuStatus] = Field(default_factory=list)
    conditions: list[Condition] = Field(default_factory=list)


class NodePartitioning(_Strict):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    name: str
    generation: int = 0
    spec: NodePartitioningSpec = Field(default_factory=NodePartitioningSpec)
    status: NodePartitioningStatus | None = None

    def desired(self) -> dict[int | str, GpuPartition]:
        """Entries keyed by index when given, else by UUID."""
        return {(g.index if g.index is not None else g.uuid): g for g in self.spec.gpus}  # type: ignore[misc]


# ---- PartitioningPolicy ---------------------------------------------------------------------------------


class LabelSelectorRequirement(_Strict):
    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(_Strict):
    """metav1.LabelSelector; an empty selector matches everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, alias="matchExpressions")

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for r in self.match_expressions:
            have = r.key in labels
            if r.operator == "In" and not (have and labels[r.key] in r.values):
                return False
            if r.operator == "NotIn" and have and labels[r.key] in r.values:
                return False
            if r.operator == "Exists" and not have:
                return False
            if r.operator == "DoesNotExist" and have:
                return False
        return True


class NodeRule(_Strict):
    """Strategies for the nodes a selector matches; the first matching rule applies."""

    node_selector: LabelSelector = Field(default_factory=LabelSelector, alias="nodeSelector")
    allowed_strategies: list[StrategyName] = Field(
        default_factory=lambda: ["exclusive", "soft", "mig"], alias="allowedStrategies", min_length=1
    )
    default_strategy: StrategyName = Field(default="soft", alias="defaultStrategy")

    @model_validator(mode="after")
    def _default_allowed(self) -> NodeRule:
        if self.default_strategy not in self.allowed_strategies:
            raise ValueError(
                f"defaultStrategy {self.default_strategy} is not in allowedStrategies "
                f"{list(self.allowed_strategies)}"
            )
        return self


class Isolation(_Strict):
    """Namespaces whose claims may only get hardware-isolated devices (MIG instances, whole GPUs)."""

    namespace_selector: LabelSelector | None = Field(default=None, alias="namespaceSelector")


class Hysteresis(_Strict):
    min_hold: str = Field(default="10m", alias="minHold")
    max_changes_per_hour: int = Field(default=2, alias="maxChangesPerHour", ge=0, le=60)
    keep_percent: int = Field(default=0, alias="keepPercent", ge=0, le=100)

    @field_validator("min_hold")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)
        return v

    @property
    def min_hold_s(self) -> float:
        return parse_duration(self.min_hold)


class PartitioningPolicySpec(_Strict):
    nodes: list[NodeRule] = Field(default_factory=lambda: [NodeRule()])
    isolation: Isolation = Field(default_factory=Isolation)
    hysteresis: Hysteresis = Field(default_factory=Hysteresis)

    def rule_for(self, labels: dict[str, str]) -> NodeRule | None:
        return next((r for r in self.nodes if r.node_selector.matches(labels)), None)


def _issue_path(err: dict[str, Any]) -> str:
    return ".".join(str(p) for p in err["loc"])


def _parse(model: type[BaseModel], data: Any, where: str, field: str) -> Any:
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as e:
        first = e.errors()[0]
        path = f"{field}.{_issue_path(first)}" if first["loc"] else field
        raise PartitioningError(f"{where}: {path}: {first['msg']}") from None


def parse_node_partitioning(obj: dict[str, Any]) -> NodePartitioning:
    """A NodePartitioning object (dict as the API returns it) -> model; PartitioningError names the field."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    where = f"{KIND_NODE_PARTITIONING} {name}"
    spec = _parse(NodePartitioningSpec, obj.get("spec"), where, "spec")
    status = _parse(NodePartitioningStatus, obj["status"], where, "status") if obj.get("status") else None
    return NodePartitioning(name=name, generation=int(meta.get("generation") or 0), spec=spec, status=status)


def parse_policy(obj: dict[str, Any]) -> PartitioningPolicySpec:
    name = (obj.get("metadata") or {}).get("name") or ""
    return _parse(PartitioningPolicySpec, obj.get("spec"), f"{KIND_PARTITIONING_POLICY} {name}", "spec")


def node_partitioning_object(
    node: str, spec: NodePartitioningSpec, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The object the controller writes (spec only; status belongs to the plugin)."""
    meta: dict[str, Any] = {"name": node}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND_NODE_PARTITIONING,
        "metadata": meta,
        "spec": _without_false_pins(spec.model_dump(by_alias=True, exclude_none=True)),
    }


def _without_false_pins(spec: dict[str, Any]) -> dict[str, Any]:
    """`pinned: false` is the default: the objects the controller writes leave it out."""
    for entry in spec.get("gpus") or []:
        if entry.get("pinned") is False:
            del entry["pinned"]
    return spec


def reasons_of(obj: dict | None) -> dict[str, str]:
    """The per-GPU reasons annotation of a NodePartitioning ({} when absent or malformed: only shown)."""
    raw = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(ANNOTATION_REASONS)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v)[:REASON_MAX] for k, v in data.items() if isinstance(v, str)}
