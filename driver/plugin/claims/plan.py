"""From a ResourceClaim to what this node must prepare: pure, values in and values out.

`plan_claim` checks the claim (UID, allocation, driver, pool, shareID), finds each allocated device in the
node's catalog, resolves its opaque config within what its DeviceClass allows (api/v1alpha1/policy.py)
and reads what it consumed; nothing later reads the raw claim again. Every failure is a PrepareError whose
message names the claim (ns/name/uid), the device and the field, because it is shown in the pod's events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from api.v1alpha1 import (
    Config,
    ConfigError,
    claim_config_indices,
    request_class,
    resolve_configs,
    split_allocation_config,
)
from driver import names
from driver.limits import ClaimLimits, DeviceLimit, LimitsError
from driver.limits.env import validate
from driver.plugin.claims.catalog import NodeDevice, quantity_int

# Kubernetes' own format for shareID (a lowercase UUID, 8-4-4-4-12). It becomes part of CDI device names
# and file names, so anything else is refused before a file is written.
_SHARE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class PrepareError(Exception):
    """A claim that cannot be prepared; the message is what the user sees."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"claim {self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True)  # a value, never hashed (its consumed dict would forbid it) nor assigned to
class PlannedDevice:
    request: str  # the allocation result's request ("main" or "main/sub")
    pool: str
    device: NodeDevice
    share_id: str | None
    config: Config
    consumed: dict[str, int] = field(default_factory=dict)
    admin: bool = False  # the result's adminAccess (claims/admin.py)

    @property
    def request_name(self) -> str:
        """The claim's request the container refers to (a subrequest counts as its main request)."""
        return self.request.split("/", 1)[0]


@dataclass(frozen=True)
class ClaimPlan:
    ref: ClaimRef
    devices: tuple[PlannedDevice, ...]
    # The claim as read for this prepare: the status report's first write goes from it, without reading
    # the claim again (its resourceVersion makes a stale copy a Conflict, which re-reads).
    claim: dict | None = field(default=None, compare=False, repr=False)


def plan_claim(ref: ClaimRef, claim: dict, pool: str, catalog: dict[str, NodeDevice]) -> ClaimPlan:
    meta = claim.get("metadata") or {}
    if meta.get("uid") != ref.uid:
        raise PrepareError(
            f"{ref}: metadata.uid: the API server has {meta.get('uid')!r}; "
            "the claim was deleted and recreated under the same name"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PrepareError(f"{ref}: status.allocation: the claim is not allocated")
    alloc_devices = allocation.get("devices") or {}
    results = [r for r in alloc_devices.get("results") or [] if r.get("driver") == names.DRIVER_NAME]
    if not results:
        raise PrepareError(
            f"{ref}: status.allocation.devices.results: no device of driver {names.DRIVER_NAME}"
        )
    class_configs, claim_configs = split_allocation_config(alloc_devices.get("config") or [])
    spec_devices = (claim.get("spec") or {}).get("devices") or {}
    claim_indices = claim_config_indices(spec_devices.get("config"), claim_configs)
    planned = []
    for i, result in enumerate(results):
        where = f"{ref}: status.allocation.devices.results[{i}]"
        device_name = result.get("device", "")
        if result.get("pool") != pool:
            raise PrepareError(
                f"{where}: pool: device {device_name} is allocated from pool {result.get('pool')!r}, "
                f"this node's pool is {pool!r}"
            )
        device = catalog.get(device_name)
        if device is None:
            raise PrepareError(f"{where}: device: {device_name!r} is not a device this node publishes")
        share_id = result.get("shareID")
        if share_id is not None and not (isinstance(share_id, str) and _SHARE_ID.fullmatch(share_id)):
            raise PrepareError(f"{where}: shareID: {share_id!r} is not a lowercase UUID (8-4-4-4-12)")
        request = result.get("request", "")
        try:
            config = resolve_configs(
                class_configs,
                claim_configs,
                request,
                device.type,
                class_name=request_class(spec_devices.get("requests"), request),
                claim_indices=claim_indices,
            )
        except ConfigError as e:
            raise PrepareError(f"{ref}: device {device_name}: {e}") from None
        consumed = {}
        for key, value in (result.get("consumedCapacity") or {}).items():
            try:
                consumed[key.rpartition("/")[2]] = quantity_int(value)
            except ValueError:
                raise PrepareError(f"{where}: consumedCapacity.{key}: {value!r} is not a quantity") from None
        planned.append(
            PlannedDevice(
                request=result.get("request", ""),
                pool=pool,
                device=device,
                share_id=share_id or None,
                config=config,
                consumed=consumed,
                admin=result.get("adminAccess") is True,
            )
        )
    _check_one_slice_config(ref, planned)
    for p in planned:
        if p.device.is_limited and getattr(p.config, "memoryLimit", None) is not None:
            device_memory(ref, p)  # memoryLimit against the request, the backend and the class's ratio
    _check_one_mps_gpu(ref, planned)
    return ClaimPlan(ref=ref, devices=tuple(planned), claim=claim)


def device_memory(ref: ClaimRef, p: PlannedDevice) -> tuple[int, int]:
    """(request, hard limit) in bytes of one limited device.

    The request is what the share consumed (soft, mps) or the slot's memory; the hard limit is the
    config's `memoryLimit`, default the request. A limit above the request (a burst) is allowed only where
    something takes the memory back under pressure: an mps device whose memory the driver enforces (MPS
    evicts a client that borrowed past its soft limit), and only within the class's
    claimPolicy.maxMemoryLimitRatio (default 1: none).
    """
    where = f"{ref}: device {p.device.name}"
    if p.device.type in (names.TYPE_VGPU, names.TYPE_MPS):
        request = p.consumed.get("memory", 0)
        if request <= 0:
            raise PrepareError(
                f"{where}: consumedCapacity.memory: missing; "
                "a soft slice needs a memory amount (is DRAConsumableCapacity enabled?)"
            )
    else:
        request = p.device.capacity.get("memory", 0)
    text = getattr(p.config, "memoryLimit", None)
    if text is None:
        return request, request
    limit = quantity_int(text)
    field = f"{where}: config.memoryLimit"
    if limit < request:
        raise PrepareError(f"{field}: {text} is below the memory the claim requests ({request} bytes)")
    if limit > request:
        if not (p.device.is_mps and p.device.driver_enforced):
            raise PrepareError(
                f"{field}: {text} is above the request ({request} bytes); bursting past the request needs "
                f"an mps device whose memory the driver enforces (this device is {p.device.type}, memory "
                f"enforced by the {p.device.memory_enforcement}); set memoryLimit to the request or leave "
                "it out"
            )
        policy = getattr(p.config, "claimPolicy", None)
        ratio = getattr(policy, "maxMemoryLimitRatio", None) or 1
        if limit > request * ratio:
            raise PrepareError(
                f"{field}: {text} is more than {ratio} x the request ({request} bytes), the most the "
                "claim's DeviceClass allows (claimPolicy.maxMemoryLimitRatio)"
            )
    return request, limit


@dataclass(frozen=True)  # a value, never hashed nor assigned to (memory_partitions' callers read it)
class MemoryPartition:
    """The driver's memory partition of one GPU for a claim's containers (carve-cdi-hook memory-limits)."""

    gpu_uuid: str
    soft: int  # bytes: the request (guaranteed)
    hard: int  # bytes: the ceiling (memoryLimit, default the request)


def memory_partitions(plan: ClaimPlan) -> tuple[MemoryPartition, ...]:
    """Per GPU whose memory the driver enforces, the claim's request and limit (several shares add up)."""
    per_gpu: dict[str, list[int]] = {}
    for p in plan.devices:
        if p.device.is_limited and p.device.driver_enforced and p.device.gpu_uuid:
            request, limit = device_memory(plan.ref, p)
            acc = per_gpu.setdefault(p.device.gpu_uuid, [0, 0])
            acc[0] += request
            acc[1] += limit
    return tuple(MemoryPartition(uuid, soft, hard) for uuid, (soft, hard) in sorted(per_gpu.items()))


def _check_one_mps_gpu(ref: ClaimRef, planned: list[PlannedDevice]) -> None:
    # A client reaches one MPS control daemon (CUDA_MPS_PIPE_DIRECTORY), and carve runs one per GPU.
    gpus = sorted({p.device.gpu_uuid for p in planned if p.device.is_mps})
    if len(gpus) > 1:
        raise PrepareError(
            f"{ref}: devices: MPS shares of {len(gpus)} GPUs ({', '.join(gpus)}); a claim's MPS shares must "
            "be on one GPU (its processes reach one MPS control daemon)"
        )


def _check_one_slice_config(ref: ClaimRef, planned: list[PlannedDevice]) -> None:
    # The limiter applies one policy per claim (one region, one environment), so every soft slice and
    # slot of the claim must resolve to the same SliceConfig.
    limited = [p for p in planned if p.device.is_limited and not p.admin]
    for p in limited[1:]:
        if p.config != limited[0].config:
            raise PrepareError(
                f"{ref}: device {p.device.name}: config: differs from the config of device "
                f"{limited[0].device.name}; soft slices and slots of one claim need the same SliceConfig"
            )


def claim_limits(plan: ClaimPlan, region_path: str) -> ClaimLimits | None:
    """The limiter settings of a claim, or None when it has no soft slice or slot.

    Soft slices: the memory and cores each share consumed. Slots: the sum of the slots taken on one GPU.
    Several shares of one GPU in one claim add up. The limiter indexes devices by CUDA ordinal, so they
    are ordered by PCI bus id (then minor), the order CUDA uses under CUDA_DEVICE_ORDER=PCI_BUS_ID, which
    the claim's container edits set.
    """
    limited = [p for p in plan.devices if p.device.is_limited and not p.admin]  # admin: no quota
    if not limited:
        return None
    per_gpu: dict[str, list[int]] = {}
    order: dict[str, tuple[str, int]] = {}
    for p in limited:
        if not p.device.gpu_uuid:
            # The limiter charges each GPU to the claim whose region names its UUID; without it, a container
            # with several soft claims would charge this GPU by position, i.e. possibly to another claim.
            raise PrepareError(
                f"{plan.ref}: device {p.device.name}: attributes.uuid: missing; "
                "the limiter needs the GPU's UUID to find this claim's quota"
            )
        # The limiter holds the hard limit: under the driver's partition it is the second line, at the same
        # number, so the two never disagree about what fits.
        memory = device_memory(plan.ref, p)[1]
        if p.device.is_mps:
            cores = 0  # MPS partitions the SMs itself (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE): no throttle on top
        elif p.device.type == names.TYPE_VGPU:
            cores = p.consumed.get("cores", 0)
        else:
            cores = p.device.capacity.get("cores", 0)
        acc = per_gpu.setdefault(p.device.gpu_uuid, [0, 0])
        acc[0] += memory
        acc[1] += cores
        order[p.device.gpu_uuid] = (p.device.pci_bus_id, p.device.minor)
    config = limited[0].config
    devices = tuple(
        DeviceLimit(memory_bytes=mem, cores_percent=min(cores, 100), uuid=uuid)
        for uuid, (mem, cores) in sorted(per_gpu.items(), key=lambda kv: order[kv[0]])
    )
    # cores 100 (a whole GPU's worth of slots) means "no throttle": the limiter's 0.
    devices = tuple(
        DeviceLimit(d.memory_bytes, 0 if d.cores_percent >= 100 else d.cores_percent, d.uuid) for d in devices
    )
    limits = ClaimLimits(
        devices=devices,
        region_path=region_path,
        core_policy=getattr(config, "corePolicy", "default"),
        priority=getattr(config, "priority", "high"),
        oom_policy=getattr(config, "oomPolicy", "error"),
    )
    try:
        validate(limits)
    except LimitsError as e:
        raise PrepareError(f"{plan.ref}: devices {', '.join(p.device.name for p in limited)}: {e}") from None
    return limits
