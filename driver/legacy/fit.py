"""Does a pod fit on a node's GPUs, on which GPUs, and how good is the node: pure, values in and out.

Rules per GPU (HAMi v2.10's, docs/legacy.md "Fit"): healthy; type and UUID allowed by the pod's
annotations; fewer containers on it than its split count; enough free memory and cores; a container asking
100 cores only on an unused GPU; a container asking 0 cores not on a GPU whose cores are all taken. A
container asking N GPUs gets N distinct GPUs. The containers of a pod are placed one after another, each
seeing what the earlier ones took. The extender keeps usage in `Usage` values keyed by GPU UUID.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from driver.legacy.records import Assignment, ContainerAssignment, DeviceShare, GpuInfo, NodeGpus
from driver.legacy.request import ContainerRequest, PodRequest, Selectors

MAX_SCORE = 10  # the extender protocol's MaxExtenderPriority


@dataclass(frozen=True)
class Usage:
    containers: int = 0
    memory_mib: int = 0
    cores: int = 0

    def plus(self, memory_mib: int, cores: int) -> Usage:
        return Usage(self.containers + 1, self.memory_mib + memory_mib, self.cores + cores)

    def minus(self, memory_mib: int, cores: int) -> Usage:
        return Usage(self.containers - 1, self.memory_mib - memory_mib, self.cores - cores)


@dataclass(frozen=True)
class Fit:
    containers: tuple[ContainerAssignment, ...] = ()
    reason: str = ""  # why not, when containers is empty

    @property
    def ok(self) -> bool:
        return not self.reason


def usage_of(assignments: Iterable[Assignment]) -> dict[str, Usage]:
    """Per-GPU usage of a set of assignments (one node's)."""
    usage: dict[str, Usage] = {}
    for a in assignments:
        for c in a.containers:
            for d in c.devices:
                usage[d.uuid] = usage.get(d.uuid, Usage()).plus(d.memoryMiB, d.cores)
    return usage


def gpu_refusal(gpu: GpuInfo, req: ContainerRequest, used: Usage, sel: Selectors) -> str:
    """'' when the container may take a share of this GPU, else why not (short, for FailedNodes)."""
    if not gpu.healthy:
        return "unhealthy"
    if sel.use_types and not any(t.lower() in gpu.product.lower() for t in sel.use_types):
        return "type not in use-gputype"
    if any(t.lower() in gpu.product.lower() for t in sel.nouse_types):
        return "type in nouse-gputype"
    if sel.use_uuids and gpu.uuid not in sel.use_uuids:
        return "uuid not in use-gpuuuid"
    if gpu.uuid in sel.nouse_uuids:
        return "uuid in nouse-gpuuuid"
    if used.containers >= gpu.split:
        return f"split count {gpu.split} reached"
    memory = req.memory_on(gpu.memoryMiB)
    if gpu.memoryMiB - used.memory_mib < memory:
        return f"{gpu.memoryMiB - used.memory_mib} MiB free < {memory}"
    if 100 - used.cores < req.cores:
        return f"{100 - used.cores}% cores free < {req.cores}"
    if req.cores == 100 and used.containers > 0:
        return "exclusive request on a shared GPU"
    if req.cores == 0 and used.cores >= 100:
        return "all cores taken"
    return ""


def _order(gpus: list[GpuInfo], usage: Mapping[str, Usage], policy: str) -> list[GpuInfo]:
    def fill(g: GpuInfo) -> float:
        return usage.get(g.uuid, Usage()).memory_mib / g.memoryMiB

    # binpack: fullest first, so small pods stack up and whole GPUs stay free; spread: emptiest first.
    return sorted(gpus, key=lambda g: (-fill(g) if policy == "binpack" else fill(g), g.index))


def fit_pod(pod: PodRequest, node: NodeGpus, usage: Mapping[str, Usage]) -> Fit:
    """The GPUs for each GPU container of the pod on this node, or the first container's reason it fails."""
    working = dict(usage)
    placed = []
    for req in pod.containers:
        if req.count > len(node.gpus):
            return Fit(reason=f"container {req.name}: {req.count} GPUs asked, node has {len(node.gpus)}")
        refusals: dict[str, str] = {}
        fitting = []
        for gpu in node.gpus:
            why = gpu_refusal(gpu, req, working.get(gpu.uuid, Usage()), pod.selectors)
            if why:
                refusals[gpu.uuid] = why
            else:
                fitting.append(gpu)
        if len(fitting) < req.count:
            detail = "; ".join(f"{u}: {w}" for u, w in sorted(refusals.items()))
            return Fit(reason=f"container {req.name}: {len(fitting)} of {req.count} GPUs fit ({detail})")
        chosen = _order(fitting, working, pod.selectors.gpu_policy)[: req.count]
        devices = []
        for gpu in sorted(chosen, key=lambda g: (g.pciBusID, g.minor)):  # the CUDA order the limiter uses
            memory = req.memory_on(gpu.memoryMiB)
            working[gpu.uuid] = working.get(gpu.uuid, Usage()).plus(memory, req.cores)
            devices.append(DeviceShare(uuid=gpu.uuid, memoryMiB=memory, cores=req.cores))
        placed.append(
            ContainerAssignment(name=req.name, init=req.init, priority=req.priority, devices=tuple(devices))
        )
    return Fit(containers=tuple(placed))


def node_score(pod: PodRequest, node: NodeGpus, usage: Mapping[str, Usage], fit: Fit) -> int:
    """0..10: binpack prefers the node that is fullest after placing the pod, spread the emptiest."""
    total = sum(g.memoryMiB for g in node.gpus) or 1
    used = sum(u.memory_mib for uuid, u in usage.items() if any(g.uuid == uuid for g in node.gpus))
    used += sum(d.memoryMiB for c in fit.containers for d in c.devices)
    fill = min(used / total, 1.0)
    score = fill if pod.selectors.node_policy == "binpack" else 1.0 - fill
    return round(score * MAX_SCORE)
