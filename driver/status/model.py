"""Rows of `carve status`, joined from plain API objects and metric samples: pure, values in and out.

A row is one allocated device of carve's driver in one claim. The GPU (index, model, UUID) comes from the
ResourceSlice device the allocation names (pool = node); the strategy from the device's `type`; who set it
from the node's NodePartitioning (the controller) or else the plugin's own --strategy; the pods from the
claim's status.reservedFor, their containers from the pod specs; limits from the allocation's
consumedCapacity (soft slices) or the device's capacity; usage from the plugin's metrics, when read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from api.v1alpha1.partitioning import reasons_of
from driver import names
from driver.allocator.quantity import QuantityError
from driver.allocator.quantity import of as quantity_of

# Device `type` attribute -> the strategy that publishes it.
STRATEGY_OF_TYPE = {
    names.TYPE_GPU: names.STRATEGY_EXCLUSIVE,
    names.TYPE_VGPU: names.STRATEGY_SOFT,
    names.TYPE_SLOT: names.STRATEGY_SLOTS,
    names.TYPE_MIG: names.STRATEGY_MIG,
    names.TYPE_TIMESLICE: names.STRATEGY_TIMESLICE,
    names.TYPE_MPS: names.STRATEGY_MPS,
}
# How each strategy's quota is enforced: by the hardware (MIG), by carve's limiter, or not at all.
ENFORCEMENT_OF_STRATEGY = {
    names.STRATEGY_EXCLUSIVE: "whole-gpu",
    names.STRATEGY_MIG: "hardware",
    names.STRATEGY_SOFT: "limiter",
    names.STRATEGY_SLOTS: "limiter",
    names.STRATEGY_TIMESLICE: "none",
    names.STRATEGY_MPS: "mps+limiter",
}
SET_BY_CONTROLLER = "controller"
SET_BY_PLUGIN = "plugin"


@dataclass(frozen=True)
class Sample:
    """One metric sample of a plugin's /metrics."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass
class Row:
    node: str
    gpu_index: int | None
    gpu_model: str
    gpu_uuid: str
    strategy: str
    strategy_set_by: str
    device: str
    namespace: str
    pod: str
    container: str
    claim: str
    memory_used_bytes: int | None
    memory_limit_bytes: int | None
    cores_used_percent: float | None
    cores_limit_percent: float | None
    enforcement: str
    pods: list[str] = field(default_factory=list)
    strategy_why: str = ""  # the controller's reason and winning score for this GPU's strategy

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SliceDevice:
    node: str
    name: str
    attributes: Mapping[str, Any]
    capacity: Mapping[str, Any]


def _attr(attributes: Mapping[str, Any], key: str) -> Any:
    raw = attributes.get(key) or attributes.get(f"{names.DRIVER_NAME}/{key}")
    if not isinstance(raw, Mapping):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in raw:
            return raw[kind]
    return None


def _bytes(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(quantity_of(value).value)
    except (QuantityError, TypeError, ValueError):
        return None


def _capacity(capacity: Mapping[str, Any], key: str) -> Any:
    raw = capacity.get(key) or capacity.get(f"{names.DRIVER_NAME}/{key}")
    return raw.get("value") if isinstance(raw, Mapping) else raw


def slice_devices(slices: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], SliceDevice]:
    """(pool, device name) -> the device, for carve's slices."""
    out: dict[tuple[str, str], SliceDevice] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != names.DRIVER_NAME:
            continue
        pool = (spec.get("pool") or {}).get("name", "")
        node = spec.get("nodeName") or pool
        for d in spec.get("devices") or []:
            out[(pool, d.get("name", ""))] = SliceDevice(
                node, d.get("name", ""), d.get("attributes") or {}, d.get("capacity") or {}
            )
    return out


def strategy_setters(partitionings: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(node, GPU uuid or `#<index>`) -> who chose that GPU's strategy, from NodePartitioning specs."""
    out: dict[tuple[str, str], str] = {}
    for np in partitionings:
        node = (np.get("metadata") or {}).get("name", "")
        for g in (np.get("spec") or {}).get("gpus") or []:
            if not isinstance(g, Mapping):
                continue
            who = f"{SET_BY_CONTROLLER} ({g.get('strategy', '?')})"
            if g.get("uuid"):
                out[(node, str(g["uuid"]))] = who
            if g.get("index") is not None:
                out[(node, f"#{g['index']}")] = who
    return out


def strategy_reasons(partitionings: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(node, `#<index>`) -> why the controller last changed that GPU: its reason with the winning score
    (the NodePartitioning's strategy-reasons annotation, written by the controller)."""
    out: dict[tuple[str, str], str] = {}
    for np in partitionings:
        node = (np.get("metadata") or {}).get("name", "")
        for index, reason in reasons_of(dict(np)).items():
            out[(node, f"#{index}")] = reason
    return out


def pod_containers(pod: Mapping[str, Any], claim_name: str) -> list[str]:
    """Containers of a pod that use the claim `claim_name` (directly or made from its template)."""
    spec = pod.get("spec") or {}
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    pod_names = set()
    for rc in spec.get("resourceClaims") or []:
        if rc.get("resourceClaimName") == claim_name or statuses.get(rc.get("name")) == claim_name:
            pod_names.add(rc.get("name"))
    out = []
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        used = {r.get("name") for r in (c.get("resources") or {}).get("claims") or []}
        if used & pod_names:
            out.append(c.get("name", ""))
    return out


class Usage:
    """The plugins' metrics, indexed for rows: per (claim uid, device), per GPU."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self.by_device: dict[tuple[str, str, str], float] = {}
        self.unenforced: dict[str, float] = {}
        self.over: set[tuple[str, str]] = set()
        for s in samples:
            lb = s.labels
            if s.name == "carve_unenforced_processes":
                self.unenforced[lb.get("gpu_uuid", "")] = s.value
            elif s.name in ("carve_claim_memory_over_quota_bytes", "carve_claim_sm_over_share_percent"):
                self.over.add((lb.get("claim_uid", ""), lb.get("gpu_uuid", "")))
            elif s.name.startswith("carve_claim_"):
                self.by_device[(s.name, lb.get("claim_uid", ""), lb.get("device", ""))] = s.value

    def get(self, metric: str, claim_uid: str, device: str) -> float | None:
        return self.by_device.get((metric, claim_uid, device))


def build_rows(
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    pods: Mapping[tuple[str, str], Mapping[str, Any]],
    partitionings: Iterable[Mapping[str, Any]],
    samples: Iterable[Sample] = (),
) -> list[Row]:
    """Every allocated device of carve's driver, one row each (one per consuming pod container)."""
    devices = slice_devices(slices)
    partitionings = list(partitionings)
    setters = strategy_setters(partitionings)
    whys = strategy_reasons(partitionings)
    usage = Usage(samples)
    rows: list[Row] = []
    for claim in claims:
        meta = claim.get("metadata") or {}
        ns, name, uid = meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", "")
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        consumers = []
        for ref in status.get("reservedFor") or []:
            if ref.get("resource") == "pods":
                pod = pods.get((ns, ref.get("name", "")))
                containers = pod_containers(pod, name) if pod else []
                consumers.append((ref.get("name", ""), ",".join(containers) or "-"))
        for result in results:
            if result.get("driver") != names.DRIVER_NAME:
                continue
            pool, device_name = result.get("pool", ""), result.get("device", "")
            dev = devices.get((pool, device_name))
            attrs = dev.attributes if dev else {}
            gpu_uuid = str(_attr(attrs, "uuid") or "")
            index = _attr(attrs, "index")
            strategy = STRATEGY_OF_TYPE.get(str(_attr(attrs, "type") or ""), "-")
            node = dev.node if dev else pool
            set_by = setters.get((node, gpu_uuid)) or setters.get((node, f"#{index}")) or SET_BY_PLUGIN
            consumed = result.get("consumedCapacity") or {}
            memory_limit = _bytes(_capacity(consumed, "memory"))
            cores_limit = _bytes(_capacity(consumed, "cores"))
            if memory_limit is None and dev is not None:
                memory_limit = _bytes(_capacity(dev.capacity, "memory"))
            if cores_limit is None and dev is not None:
                cores_limit = _bytes(_capacity(dev.capacity, "cores"))
            used = usage.get("carve_claim_memory_used_bytes", uid, device_name)
            sm = usage.get("carve_claim_sm_utilization_percent", uid, device_name)
            enforcement = ENFORCEMENT_OF_STRATEGY.get(strategy, "-")
            if usage.unenforced.get(gpu_uuid):
                enforcement += f",unenforced={int(usage.unenforced[gpu_uuid])}"
            if (uid, gpu_uuid) in usage.over:
                enforcement += ",over-share"
            for pod_name, container in consumers or [("-", "-")]:
                rows.append(
                    Row(
                        node=node,
                        gpu_index=int(index) if isinstance(index, int) else None,
                        gpu_model=str(_attr(attrs, "productName") or "-"),
                        gpu_uuid=gpu_uuid,
                        strategy=strategy,
                        strategy_set_by=set_by,
                        device=device_name,
                        namespace=ns,
                        pod=pod_name,
                        container=container,
                        claim=name,
                        memory_used_bytes=int(used) if used is not None else None,
                        memory_limit_bytes=memory_limit,
                        cores_used_percent=sm,
                        cores_limit_percent=float(cores_limit) if cores_limit is not None else None,
                        enforcement=enforcement,
                        strategy_why=whys.get((node, f"#{index}"), ""),
                    )
                )
    rows.sort(
        key=lambda r: (
            r.node,
            r.gpu_index if r.gpu_index is not None else -1,
            r.device,
            r.namespace,
            r.pod,
            r.claim,
        )
    )
    return rows


def short_uuid(uuid: str) -> str:
    """`GPU-5c2d1f9e-...` -> `GPU-5c2d1f9e`: enough to tell a node's GPUs apart in a table."""
    head, _, rest = uuid.partition("-")
    return f"{head}-{rest[:8]}" if rest else (uuid or "-")
