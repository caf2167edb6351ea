"""Opaque device configuration of carve claims (`gpu.carve.dev/v1alpha1`): the models and their parsing.

Users put these objects in `spec.devices.config[].opaque.parameters` of a ResourceClaim (or of a
DeviceClass) with `driver: gpu.carve.dev`. Two kinds exist, one per family of devices:
- `GpuConfig` for devices that are a whole GPU or a hardware partition (types gpu, mig, timeslice);
- `SliceConfig` for soft slices of a GPU (types vgpu, slot, mps).
Each may carry a `claimPolicy` (`GpuClaimPolicy`, `SliceClaimPolicy`), valid only in a DeviceClass's config:
what the claims of that class may change (policy.py applies it).
Parsing is strict: unknown fields, wrong types and values outside the enums are errors whose message
names the field path and the rejected value, because it ends up verbatim in the pod's events.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from driver.names import CONFIG_API_VERSION

KIND_GPU_CONFIG = "GpuConfig"
KIND_SLICE_CONFIG = "SliceConfig"

SharingStrategy = Literal["Exclusive", "TimeSlicing"]
TimeSliceInterval = Literal["Default", "Short", "Medium", "Long"]
CorePolicy = Literal["default", "force", "disable"]
Priority = Literal["high", "low"]
OomPolicy = Literal["error", "kill"]


class ConfigError(ValueError):
    """An opaque config that carve cannot use.

    It holds one or more issues, each (field path, what is wrong, rejected value); `str()` is
    `<where>: <field>: <detail>; ...`. `field` and `value` are those of the first issue.
    """

    def __init__(self, detail: str, field: str = "", value: Any = None, where: str = "") -> None:
        self.where = where
        self.issues: list[tuple[str, str, Any]] = [(field, detail, value)]
        super().__init__(self._render())

    @classmethod
    def of(cls, issues: list[tuple[str, str, Any]], where: str = "") -> ConfigError:
        err = cls(issues[0][1], issues[0][0], issues[0][2], where)
        err.issues = list(issues)
        err.args = (err._render(),)
        return err

    @property
    def field(self) -> str:
        return self.issues[0][0]

    @property
    def value(self) -> Any:
        return self.issues[0][2]

    def within(self, where: str, field_prefix: str) -> ConfigError:
        """The same issues seen from an enclosing object: `config[2]` + `opaque.parameters` + field."""
        issues = [(f"{field_prefix}.{f}" if f else field_prefix, d, v) for f, d, v in self.issues]
        return ConfigError.of(issues, where)

    def _render(self) -> str:
        text = "; ".join(f"{f}: {d}" if f else d for f, d, _ in self.issues)
        return f"{self.where}: {text}" if self.where else text


class _Strict(BaseModel):
    # strict: no "1" -> 1 coercion; forbid: a typo such as `corepolicy` must not be silently ignored.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


# Why a time-slice length other than the driver's cannot be honoured (docs/configuration.md says the same).
INTERVAL_UNSUPPORTED = (
    "carve cannot set a time-slice length: NVML (pynvml) has no call for the compute time slice of a "
    "bare-metal GPU (nvmlDeviceSetVgpuSchedulerState is for vGPU hosts; `nvidia-smi compute-policy "
    "--set-timeslice` uses a private driver interface); only Default (the driver's own) is accepted"
)


class TimeSlicingSettings(_Strict):
    """How long each process on a time-shared GPU may run before the GPU switches to another."""

    interval: TimeSliceInterval = Field(
        "Default",
        description="Time-slice length. Only Default (the driver's) is accepted: Short, Medium and Long "
        "are reserved, because NVML offers no call to set the time slice of a bare-metal GPU.",
        json_schema_extra={"enum": ["Default"]},
    )

    @field_validator("interval")
    @classmethod
    def _only_the_driver_default(cls, value: str) -> str:
        # Accepting a value carve cannot apply would promise a behaviour the GPU never gets.
        if value != "Default":
            raise ValueError(f"{value!r}: {INTERVAL_UNSUPPORTED}")
        return value


# The JSON Schema twin of Sharing's validator below, so schema users (docs, editors, Helm) see the rule.
_TIME_SLICING_RULE = {
    "if": {"required": ["timeSlicing"], "properties": {"timeSlicing": {"type": "object"}}},
    "then": {"required": ["strategy"], "properties": {"strategy": {"const": "TimeSlicing"}}},
}


class Sharing(_Strict):
    """How the containers and pods that use one claim share its GPU."""

    model_config = ConfigDict(json_schema_extra=_TIME_SLICING_RULE)

    strategy: SharingStrategy = Field(
        "Exclusive",
        description="Exclusive: the claim's users run with the GPU's default compute mode. "
        "TimeSlicing: the GPU is time-shared, tuned by timeSlicing.",
    )
    timeSlicing: TimeSlicingSettings | None = Field(
        None, description="Settings of the TimeSlicing strategy; only valid with strategy TimeSlicing."
    )

    @model_validator(mode="after")
    def _time_slicing_needs_its_strategy(self) -> Sharing:
        if self.timeSlicing is not None and self.strategy != "TimeSlicing":
            raise ValueError(f"only valid with strategy TimeSlicing (strategy is {self.strategy})")
        return self


_CLAIM_POLICY_DOC = (
    "Only in a DeviceClass's config: what the config of a claim of this class may change. A field listed "
    "here may be set by a claim to one of the listed values (or the class's own value); a field left out "
    "follows the safe rule (docs/configuration.md)."
)


class SharingPolicy(_Strict):
    """The `sharing` fields a claim's GpuConfig may choose."""

    strategy: list[SharingStrategy] | None = Field(
        None, description="Sharing strategies a claim may choose. Default rule: any."
    )


class GpuClaimPolicy(_Strict):
    """What a claim's GpuConfig may change (set in a DeviceClass's GpuConfig)."""

    sharing: SharingPolicy | None = Field(None, description="Bounds of `sharing`.")


class SliceClaimPolicy(_Strict):
    """What a claim's SliceConfig may change (set in a DeviceClass's SliceConfig)."""

    corePolicy: list[CorePolicy] | None = Field(
        None,
        description="Core policies a claim may choose. Default rule: the class's or a tighter one "
        "(disable < default < force); never disable unless the class's own is disable.",
    )
    priority: list[Priority] | None = Field(
        None, description="Priorities a claim may choose. Default rule: the class's or lower (low < high)."
    )
    oomPolicy: list[OomPolicy] | None = Field(
        None, description="OOM policies a claim may choose. Default rule: any."
    )
    maxMemoryLimitRatio: float | int | None = Field(
        None,
        ge=1,
        le=16,
        description="Largest memoryLimit a claim may set, as a multiple of the memory it requests (e.g. "
        "1.5). Default rule: 1, i.e. no burst. Bursting also needs an mps device whose memory the driver "
        "enforces (docs/enforcement.md).",
    )


# Defaults make `GpuConfig()` handy in code, but a user's object must say what it is: parse_config
# requires both keys, and the exported schema says so too.
_TYPE_KEYS_REQUIRED = {"required": ["apiVersion", "kind"]}
_API_VERSION_DOC = "Always gpu.carve.dev/v1alpha1."


class GpuConfig(_Strict):
    """Configuration of whole GPUs, time-sliced GPUs and MIG devices."""

    model_config = ConfigDict(json_schema_extra=_TYPE_KEYS_REQUIRED)

    apiVersion: Literal["gpu.carve.dev/v1alpha1"] = Field(CONFIG_API_VERSION, description=_API_VERSION_DOC)
    kind: Literal["GpuConfig"] = Field(KIND_GPU_CONFIG, description="GpuConfig.")
    sharing: Sharing = Field(default_factory=Sharing, description="How users of the claim share the device.")
    claimPolicy: GpuClaimPolicy | None = Field(None, description=_CLAIM_POLICY_DOC)


class SliceConfig(_Strict):
    """Configuration of soft slices (vgpu) and slots: how the limiter treats the claim's processes."""

    model_config = ConfigDict(json_schema_extra=_TYPE_KEYS_REQUIRED)

    apiVersion: Literal["gpu.carve.dev/v1alpha1"] = Field(CONFIG_API_VERSION, description=_API_VERSION_DOC)
    kind: Literal["SliceConfig"] = Field(KIND_SLICE_CONFIG, description="SliceConfig.")
    corePolicy: CorePolicy = Field(
        "default",
        description="default: the core limit may be exceeded while the GPU is otherwise idle; "
        "force: the core limit always holds; disable: no core limit (memory is still limited).",
    )
    priority: Priority = Field(
        "high", description="high or low; low-priority claims yield compute to high-priority ones on a GPU."
    )
    oomPolicy: OomPolicy = Field(
        "error",
        description="error: an allocation beyond the memory limit fails with CUDA_ERROR_OUT_OF_MEMORY; "
        "kill: the process is killed.",
    )
    memoryLimit: str | None = Field(
        None,
        pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)?$",
        description="Hard ceiling of the claim's GPU memory per device, a quantity such as '6Gi'; the "
        "consumed `memory` capacity is the request (the guarantee the scheduler counts). Default: the "
        "request. Above the request only on mps devices whose memory the driver enforces, and within the "
        "class's claimPolicy.maxMemoryLimitRatio (docs/enforcement.md).",
    )
    placement: Literal["binpack", "spread"] | None = Field(
        None,
        description="Which GPU of a node a soft slice goes to when several could hold it: binpack (the "
        "most used first) or spread (the least used first). Read by carve's allocator (simulator, "
        "what-if planning); the kube-scheduler picks first fit in published order whatever this says "
        "(docs/allocate.md, Placement). A DeviceClass's value wins over a claim's. Default: first fit.",
    )
    claimPolicy: SliceClaimPolicy | None = Field(None, description=_CLAIM_POLICY_DOC)


Config = GpuConfig | SliceConfig
MODELS: dict[str, type[GpuConfig] | type[SliceConfig]] = {
    KIND_GPU_CONFIG: GpuConfig,
    KIND_SLICE_CONFIG: SliceConfig,
}


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schemas() -> dict[str, dict[str, Any]]:
    """Kind -> JSON Schema (draft 2020-12) of that kind's `parameters` object (exported by schema.py)."""
    return {
        kind: {"$schema": JSON_SCHEMA_DIALECT, **model.model_json_schema(mode="validation")}
        for kind, model in MODELS.items()
    }


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(err: dict[str, Any]) -> tuple[str, str, Any]:
    """One pydantic error -> (field path, what is wrong, rejected value)."""
    loc = tuple(err["loc"])
    value = err.get("input")
    kind = err["type"]
    # A model_validator error has no field of its own; ours always concerns the `timeSlicing` key.
    if kind == "value_error" and isinstance(value, dict) and "timeSlicing" in value:
        return _path((*loc, "timeSlicing")), str(err["ctx"]["error"]), value["timeSlicing"]
    field = _path(loc)
    if kind == "extra_forbidden":
        return field, "unknown field", value
    if kind == "value_error":  # our own validators: their message is the whole story
        return field, str(err["ctx"]["error"]), value
    if kind == "literal_error":
        return field, f"{value!r} is not one of {err['ctx']['expected']}", value
    if kind == "missing":
        return field, "required field is missing", None
    return field, f"{err['msg']} (got {value!r})", value


def parse_config(raw: dict[str, Any] | bytes | str) -> Config:
    """Parse one opaque `parameters` object (a dict, or its JSON text) into GpuConfig or SliceConfig."""
    if isinstance(raw, (bytes, str)):
        try:
            raw = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ConfigError(f"not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a JSON object, got {type(raw).__name__}", value=raw)
    api_version = raw.get("apiVersion")
    if api_version != CONFIG_API_VERSION:
        got = "missing" if api_version is None else f"{api_version!r} is not supported"
        raise ConfigError(f"{got}; expected {CONFIG_API_VERSION!r}", field="apiVersion", value=api_version)
    kind = raw.get("kind")
    model = MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        got = "missing" if kind is None else f"{kind!r} is not supported"
        raise ConfigError(f"{got}; expected one of {', '.join(MODELS)}", field="kind", value=kind)
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise ConfigError.of([_describe(d) for d in e.errors(include_url=False)]) from None
