"""What a pod asks of the legacy shim, parsed once at the edge: HAMi resource names, annotations, defaults.

Pure: a pod dict (Kubernetes JSON) in, a `PodRequest` out. Values are read from limits, falling back to
requests, as HAMi v2.10 does. Defaults (docs/legacy.md, "Defaults"):
- gpu only: the whole memory of each GPU and 100% cores (an exclusive card, HAMi's webhook rule);
- gpu + gpumem or gpumem-percentage: that memory, cores `default_cores` (0 = no SM cap);
- gpumem only: `default_gpu_num` GPUs (the kubelet never calls Allocate for a container without
  `nvidia.com/gpu`, so the optional webhook adds it; docs/legacy.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from driver import names
from driver.allocator import quantity

POLICIES = ("binpack", "spread")
PRIORITIES = ("high", "low")  # CARVE_PRIORITY; high < low in the order "who yields"


class RequestError(ValueError):
    """A pod whose GPU request cannot be honoured; the message names the pod, container and field."""


@dataclass(frozen=True)
class Defaults:
    memory_mib: int = 0  # 0: a container without gpumem/percentage gets the whole GPU's memory
    cores: int = 0
    gpu_num: int = 1
    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    # The admin's priority rule (docs/legacy.md, "Priority"), as a DeviceClass bounds a claim's SliceConfig
    # (docs/configuration.md, claimPolicy): a container naming no nvidia.com/priority gets `priority`; one
    # may ask for the default or lower (low), and for high above a low default only in the namespaces of
    # `high_priority_namespaces` ("*": every namespace).
    priority: str = "high"
    high_priority_namespaces: tuple[str, ...] = ()

    def may_run_high(self, namespace: str) -> bool:
        return (
            self.priority == "high"
            or "*" in self.high_priority_namespaces
            or namespace in self.high_priority_namespaces
        )


@dataclass(frozen=True)
class ContainerRequest:
    name: str
    init: bool
    count: int  # distinct physical GPUs
    memory_mib: int  # per GPU; 0 when `percent` says it
    percent: int  # per GPU, 1..100; 0 when memory_mib says it
    cores: int  # per GPU, 0..100
    priority: str  # CARVE_PRIORITY: high|low

    def memory_on(self, gpu_memory_mib: int) -> int:
        """MiB this container takes on a GPU of that size (a percentage charges its share, as HAMi does)."""
        return self.memory_mib if self.memory_mib else gpu_memory_mib * self.percent // 100


@dataclass(frozen=True)
class Selectors:
    """The HAMi pod annotations that restrict which GPUs may be used, and the two scheduling policies."""

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    node_policy: str = "binpack"
    gpu_policy: str = "spread"


@dataclass(frozen=True)
class PodRequest:
    namespace: str
    name: str
    uid: str
    containers: tuple[ContainerRequest, ...]  # init containers first, then app containers; GPU users only
    selectors: Selectors = field(default_factory=Selectors)

    @property
    def wants_gpu(self) -> bool:
        return bool(self.containers)

    def __str__(self) -> str:
        return f"pod {self.namespace}/{self.name}"


def _whole(pod: str, container: str, key: str, raw: object) -> int:
    try:
        value = quantity.of(raw).value
    except (quantity.QuantityError, TypeError, ValueError):
        raise RequestError(f"{pod}: container {container}: {key}: {raw!r} is not a quantity") from None
    if value.denominator != 1 or value < 0:
        raise RequestError(f"{pod}: container {container}: {key}: {raw!r} must be a whole number >= 0")
    return int(value)


def _resources(container: dict) -> dict:
    res = container.get("resources") or {}
    merged = dict(res.get("requests") or {})
    merged.update(res.get("limits") or {})  # limits first, as HAMi reads them
    return merged


def wants_legacy_gpu(pod: dict) -> bool:
    """Does any container (init included) name one of the five resources? (the scheduler's IsInterested)"""
    spec = pod.get("spec") or {}
    wanted = (
        names.LEGACY_GPU,
        names.LEGACY_GPUMEM,
        names.LEGACY_GPUMEM_PERCENTAGE,
        names.LEGACY_GPUCORES,
        names.LEGACY_PRIORITY,
    )
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if any(k in _resources(c) for k in wanted):
            return True
    return False


def container_request(
    pod: str, c: dict, init: bool, defaults: Defaults, namespace: str = ""
) -> ContainerRequest | None:
    """One container's GPU request with HAMi's defaults, or None when it asks for no GPU."""
    name = c.get("name", "")
    res = _resources(c)
    count = _whole(pod, name, names.LEGACY_GPU, res[names.LEGACY_GPU]) if names.LEGACY_GPU in res else None
    memory = (
        _whole(pod, name, names.LEGACY_GPUMEM, res[names.LEGACY_GPUMEM]) if names.LEGACY_GPUMEM in res else 0
    )
    percent = 0
    if names.LEGACY_GPUMEM_PERCENTAGE in res:
        percent = _whole(pod, name, names.LEGACY_GPUMEM_PERCENTAGE, res[names.LEGACY_GPUMEM_PERCENTAGE])
        if percent > 100:
            raise RequestError(
                f"{pod}: container {name}: {names.LEGACY_GPUMEM_PERCENTAGE}: {percent} is over 100"
            )
    cores = None
    if names.LEGACY_GPUCORES in res:
        cores = _whole(pod, name, names.LEGACY_GPUCORES, res[names.LEGACY_GPUCORES])
        if cores > 100:
            raise RequestError(f"{pod}: container {name}: {names.LEGACY_GPUCORES}: {cores} is over 100")
    priority = defaults.priority
    if names.LEGACY_PRIORITY in res:
        # HAMi: 0 is the high-priority task, anything above is low.
        raw = res[names.LEGACY_PRIORITY]
        priority = "high" if _whole(pod, name, names.LEGACY_PRIORITY, raw) == 0 else "low"
        if priority == "high" and not defaults.may_run_high(namespace):
            raise RequestError(
                f"{pod}: container {name}: {names.LEGACY_PRIORITY}: {raw} (high) is not allowed in namespace "
                f"{namespace!r}: the cluster's default priority is {defaults.priority} and high is allowed "
                f"only in {', '.join(defaults.high_priority_namespaces) or 'no namespace'} "
                "(scheduler-extender --default-priority, --high-priority-namespaces)"
            )
    if count is None:
        if not (memory or percent or cores is not None):
            return None
        count = defaults.gpu_num
    if count == 0:
        return None
    whole_card = not memory and percent in (0, 100)
    if memory:
        percent = 0
    elif not percent:
        if defaults.memory_mib:
            memory = defaults.memory_mib
        else:
            percent = 100
    if cores is None:
        # HAMi's webhook: a whole card asked with gpu alone is an exclusive card (100 cores).
        cores = 100 if whole_card else defaults.cores
    return ContainerRequest(name, init, count, memory, percent, cores, priority)


def _csv(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


def _policy(pod: str, key: str, value: str | None, default: str) -> str:
    if not value:
        return default
    if value not in POLICIES:
        raise RequestError(f"{pod}: annotation {key}: {value!r} is not one of {', '.join(POLICIES)}")
    return value


def pod_request(pod: dict, defaults: Defaults = Defaults()) -> PodRequest:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    who = f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"
    containers = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            req = container_request(who, c, init, defaults, meta.get("namespace", ""))
            if req is not None:
                containers.append(req)
    ann = meta.get("annotations") or {}
    selectors = Selectors(
        use_types=_csv(ann.get(names.HAMI_USE_GPUTYPE)),
        nouse_types=_csv(ann.get(names.HAMI_NOUSE_GPUTYPE)),
        use_uuids=_csv(ann.get(names.HAMI_USE_GPUUUID)),
        nouse_uuids=_csv(ann.get(names.HAMI_NOUSE_GPUUUID)),
        node_policy=_policy(
            who, names.HAMI_NODE_POLICY, ann.get(names.HAMI_NODE_POLICY), defaults.node_policy
        ),
        gpu_policy=_policy(who, names.HAMI_GPU_POLICY, ann.get(names.HAMI_GPU_POLICY), defaults.gpu_policy),
    )
    return PodRequest(
        meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""), tuple(containers), selectors
    )
