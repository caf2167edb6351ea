"""The simulated cluster: nodes of emulated GPUs, their ResourceSlices, and one stateful Allocator each.

A `SimNode` also keeps the book-keeping the event loop and the node policies read: which GPUs are busy
(any device of theirs allocated), how full each GPU is (for the spread/bin-pack scores), and a cache of
claim shapes that did not fit since capacity last grew (a failure stays a failure until something
leaves the node, so a full cluster does not re-run the allocator for every identical arrival).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from driver import names
from driver.allocator import Allocator
from driver.allocator.quantity import of as quantity_of
from driver.devices import ModelError, Settings, build_slices
from driver.devices.catalog import fake_gpu
from driver.gpu.model import Gpu
from driver.simulate.inputs import NodeGroup, SimulateError

# `--strategy auto`: each GPU starts with its node's strategy or the policy default, and the controller's
# planner (driver/controller/planner.py) changes idle GPUs as pending pods ask (driver/simulate/auto.py).
AUTO = "auto"
# The simulator publishes slices as a 1.36 cluster would (consumable capacity and counters on).
K8S_VERSION = "1.36"


def device_classes() -> list[dict[str, Any]]:
    """carve's DeviceClasses as the allocator reads them (same selectors as deviceclasses/*.yaml)."""
    types = {
        names.CLASS_GPU: names.TYPE_GPU,
        names.CLASS_VGPU: names.TYPE_VGPU,
        names.CLASS_SLOT: names.TYPE_SLOT,
        names.CLASS_MIG: names.TYPE_MIG,
        names.CLASS_TIMESLICE: names.TYPE_TIMESLICE,
        names.CLASS_MPS: names.TYPE_MPS,
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": (
                f'device.driver == "{names.DRIVER_NAME}" && '
                f'device.attributes["{names.DRIVER_NAME}"].type == "{kind}"'
            )}}]},
        }
        for cls, kind in types.items()
    ]


def resolve_strategy(gpu: Gpu, node_strategy: str | None, forced: str,
                     auto_default: str = names.STRATEGY_SOFT) -> str:
    """The strategy of one GPU. `forced` (the --strategy flag) other than auto overrides the node's.

    A forced `mig` on a GPU without MIG gives `exclusive`: that is what such a GPU offers when its
    operator wants hardware isolation only. A node that itself asks for `mig` on such a GPU is an error
    (raised by the device model and reported with the node's field). Under auto a GPU without a node
    strategy starts with `auto_default` (soft where it cannot run MIG and the default is mig).
    """
    if forced != AUTO:
        if forced == names.STRATEGY_MIG and not gpu.mig_capable:
            return names.STRATEGY_EXCLUSIVE
        return forced
    if node_strategy:
        return node_strategy
    if auto_default == names.STRATEGY_MIG and not gpu.mig_capable:
        return names.STRATEGY_SOFT
    return auto_default


@dataclass
class GpuLoad:
    """Allocated share of one GPU, from the allocation results on it."""

    memory_total: int
    memory_used: int = 0
    cores_used: float = 0.0  # percent of the GPU
    holders: int = 0  # allocation results currently on this GPU

    @property
    def fraction(self) -> float:
        if not self.holders:
            return 0.0
        mem = self.memory_used / self.memory_total if self.memory_total else 0.0
        return min(1.0, max(mem, self.cores_used / 100.0))


@dataclass(frozen=True)
class DeviceCost:
    """What allocating a device takes from its GPU when the result says nothing finer."""

    gpu: str  # parentUUID
    memory: int | None  # None: the device publishes no capacity
    cores: float | None
    # Shared with no compute quota (time-slicing): its holders take turns on all SMs, so together they get
    # at most the GPU's compute however much they need (engine.py slows them down accordingly).
    turns: bool = False


@dataclass
class SimNode:
    name: str
    shape: int  # nodes of one shape (models and strategies) accept the same claims when empty
    slices: list[dict[str, Any]]
    allocator: Any  # driver.allocator.Allocator
    gpus: dict[str, GpuLoad]
    devices: dict[str, DeviceCost]
    failed: set[int] = field(default_factory=set)  # claim-shape ids that did not fit since the last departure
    load_sum: float = 0.0  # sum of GpuLoad.fraction, kept current by apply()
    gpu_list: list[Gpu] = field(default_factory=list)
    strategies: dict[int, str] = field(default_factory=dict)  # GPU index -> strategy it runs
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> claim with its allocation
    pinned: bool = False  # cluster.yaml names its strategy: `auto` does not change it

    @property
    def load(self) -> float:
        return self.load_sum / len(self.gpus) if self.gpus else 1.0

    def busy_gpus(self) -> int:
        return sum(1 for g in self.gpus.values() if g.holders)

    def apply(self, results: Iterable[dict[str, Any]], sign: int, fallback_cores: float) -> int:
        """Add (sign=1) or remove (sign=-1) allocation results; returns the change in busy GPUs.

        Cost of a result: its consumedCapacity where the device shares capacity, else the device's own
        capacity (whole GPU, MIG instance, slot); the cores of a result on a device without a compute quota
        (time-slicing) are `fallback_cores`, the pod's demand per result, since there is no quota to read.
        """
        busy_change = 0
        for result in results:
            cost = self.devices[result["device"]]
            load = self.gpus[cost.gpu]
            before_busy = load.holders > 0
            before = load.fraction
            consumed = result.get("consumedCapacity") or {}
            if consumed:
                memory = int(quantity_of(consumed.get("memory", 0)).value)
                cores = float(quantity_of(consumed.get("cores", 0)).value)
            elif cost.memory is not None:
                memory, cores = cost.memory, cost.cores or 0.0
            else:
                memory, cores = 0, fallback_cores
            if cost.turns:
                cores = fallback_cores
            load.memory_used += sign * memory
            load.cores_used += sign * cores
            load.holders += sign
            self.load_sum += load.fraction - before
            busy_change += int(load.holders > 0) - int(before_busy)
        return busy_change


def restrategize(node: SimNode, changes: dict[int, str], settings: Settings | None = None) -> None:
    """Run other strategies on idle GPUs of `node`: new slices, a new allocator holding every running
    claim again (their devices are on GPUs that did not change), new device costs."""
    node.strategies = {**node.strategies, **changes}
    node.slices = build_slices(node.name, node.gpu_list, node.strategies, settings or Settings(),
                               k8s_version=K8S_VERSION, validate=False)
    node.allocator = Allocator(node.slices, device_classes())
    for claim in node.claims.values():
        node.allocator.add_allocated(claim)
    node.devices = _device_costs(node.slices, node.gpu_list)
    node.failed.clear()


def _device_costs(slices: list[dict[str, Any]], gpus: list[Gpu]) -> dict[str, DeviceCost]:
    mp = {g.uuid: g.multiprocessors for g in gpus}
    costs: dict[str, DeviceCost] = {}
    for s in slices:
        for d in s["spec"].get("devices") or []:
            attrs = d.get("attributes") or {}
            parent = (attrs.get("parentUUID") or attrs.get("uuid") or {}).get("string", "")
            cap = d.get("capacity") or {}
            turns = bool(d.get("allowMultipleAllocations")) and "cores" not in cap
            if turns:
                memory = int(quantity_of(cap["memory"]["value"]).value) if "memory" in cap else None
                costs[d["name"]] = DeviceCost(parent, memory, None, turns=True)
            elif "memory" in cap:
                memory = int(quantity_of(cap["memory"]["value"]).value)
                sms = float(quantity_of(cap.get("multiprocessors", {}).get("value", "0")).value)
                if (attrs.get("type") or {}).get("string") == "mig" and sms and mp.get(parent):
                    # A MIG instance's `cores` is 100% of the instance (what its limiter allows); of the
                    # GPU it holds its SMs' share (1g of an A100: 14 of 108 SMs, 13%).
                    cores = 100.0 * sms / mp[parent]
                elif "cores" in cap:
                    cores = float(quantity_of(cap["cores"]["value"]).value)
                else:  # a device without a cores capacity: its share of the GPU's SMs
                    cores = 100.0 * sms / mp[parent] if mp.get(parent) else 100.0
                costs[d["name"]] = DeviceCost(parent, memory, cores)
            else:
                costs[d["name"]] = DeviceCost(parent, None, None)
    return costs


@dataclass
class SimCluster:
    nodes: list[SimNode]
    pristine: dict[int, SimNode]  # one untouched node per shape, for "could this ever fit?"
    gpus_total: int
    max_gpu_memory: int
    strategies: dict[str, int]  # strategy -> number of GPUs under it


def build_cluster(groups: list[NodeGroup], strategy: str = AUTO, settings: Settings | None = None,
                  label: str = "cluster.yaml", auto_default: str = names.STRATEGY_SOFT) -> SimCluster:
    """Every node of every group, with slices built by the real device model. Under `auto` a GPU starts
    with its node's strategy (pinned), else `auto_default` (the policy's default; soft where the GPU
    cannot run it) and the planner changes it as claims ask."""
    settings = settings or Settings()
    classes = device_classes()
    nodes: list[SimNode] = []
    pristine: dict[int, SimNode] = {}
    shapes: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}
    counts: dict[str, int] = {}
    max_memory = 0
    for gi, group in enumerate(groups):
        for k in range(group.count):
            node_name = group.name if group.count == 1 else f"{group.name}-{k}"
            try:
                gpus = [fake_gpu(model, i, node_name) for i, model in enumerate(group.models)]
            except (KeyError, ValueError) as e:
                raise SimulateError(f"{label}: nodes[{gi}].gpus: {e}") from None
            per = group.gpu_strategies or (group.strategy,) * len(gpus)
            chosen = {g.index: resolve_strategy(g, per[g.index], strategy, auto_default) for g in gpus}
            try:
                slices = build_slices(node_name, gpus, chosen, settings, k8s_version=K8S_VERSION)
            except ModelError as e:
                raise SimulateError(f"{label}: nodes[{gi}].strategy: {e}") from None
            key = (group.models, tuple(chosen[g.index] for g in gpus))
            shape = shapes.setdefault(key, len(shapes))
            node = _node(node_name, shape, slices, gpus, classes)
            node.strategies = dict(chosen)
            node.pinned = strategy != AUTO or group.strategy is not None
            nodes.append(node)
            if shape not in pristine:
                pristine[shape] = _node(node_name, shape, slices, gpus, classes)
            for s in chosen.values():
                counts[s] = counts.get(s, 0) + 1
            max_memory = max([max_memory, *(g.memory_bytes for g in gpus)])
    return SimCluster(
        nodes=nodes,
        pristine=pristine,
        gpus_total=sum(len(n.gpus) for n in nodes),
        max_gpu_memory=max_memory,
        strategies=dict(sorted(counts.items())),
    )


def _node(name: str, shape: int, slices: list[dict[str, Any]], gpus: list[Gpu],
          classes: list[dict[str, Any]]) -> SimNode:
    return SimNode(
        name=name,
        shape=shape,
        slices=slices,
        allocator=Allocator(slices, classes),
        gpus={g.uuid: GpuLoad(memory_total=g.memory_bytes) for g in gpus},
        devices=_device_costs(slices, gpus),
        gpu_list=list(gpus),
    )
