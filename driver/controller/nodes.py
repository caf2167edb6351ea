"""A node as the planner sees it: its GPUs and their strategies read back from its ResourceSlices, the
claims allocated on it, and what-if slices under other strategies. Pure: values in, values out.

The Gpu records come from the published attributes (productName, index, minor, uuid, pciBusID, versions)
and the emulated-model catalog (driver/devices/catalog.json) for what a product offers (memory, SMs,
MIG profiles). A GPU whose product the catalog does not know keeps its strategy: the planner cannot
model it under another one.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from driver import names
from driver.allocator import Allocator, Unallocatable
from driver.devices import Settings, build_slices
from driver.devices.attributes import PCI_BUS_ID_ATTRIBUTE
from driver.devices.catalog import fake_gpu, key_for_product
from driver.gpu.model import Gpu

# Device types each strategy publishes (mig also publishes the whole GPU as type gpu).
TYPES: dict[str, frozenset[str]] = {
    names.STRATEGY_EXCLUSIVE: frozenset({names.TYPE_GPU}),
    names.STRATEGY_SOFT: frozenset({names.TYPE_VGPU}),
    names.STRATEGY_SLOTS: frozenset({names.TYPE_SLOT}),
    names.STRATEGY_MIG: frozenset({names.TYPE_MIG, names.TYPE_GPU}),
    names.STRATEGY_TIMESLICE: frozenset({names.TYPE_TIMESLICE}),
}
# Strategies whose GPU can still take claims while it holds one.
SHARED = frozenset({names.STRATEGY_SOFT, names.STRATEGY_SLOTS, names.STRATEGY_MIG, names.STRATEGY_TIMESLICE})
_STRATEGY_OF_TYPE = {
    names.TYPE_VGPU: names.STRATEGY_SOFT,
    names.TYPE_SLOT: names.STRATEGY_SLOTS,
    names.TYPE_MIG: names.STRATEGY_MIG,
    names.TYPE_TIMESLICE: names.STRATEGY_TIMESLICE,
    names.TYPE_GPU: names.STRATEGY_EXCLUSIVE,
}
# carve's own classes select one device type each; other classes may select anything.
CLASS_TYPES = {
    names.CLASS_GPU: names.TYPE_GPU,
    names.CLASS_VGPU: names.TYPE_VGPU,
    names.CLASS_SLOT: names.TYPE_SLOT,
    names.CLASS_MIG: names.TYPE_MIG,
    names.CLASS_TIMESLICE: names.TYPE_TIMESLICE,
}
_GPU_NAME = re.compile(r"^gpu-(\d+)(?:-|$)")
WHAT_IF_VERSION = "1.36"  # what-if slices only feed the allocator; any version's layout has the same devices


def _attr(attrs: dict[str, Any], key: str) -> Any:
    raw = attrs.get(key) or attrs.get(f"{names.DRIVER_NAME}/{key}")
    return next(iter(raw.values())) if isinstance(raw, dict) and raw else None


@dataclass(frozen=True)
class PublishedGpu:
    gpu: Gpu
    strategy: str
    modelled: bool  # the catalog knows its product: it can be given another strategy


def gpus_from_slices(node: str, slices: Iterable[dict[str, Any]]) -> list[PublishedGpu]:
    """The GPUs of one node's pool and the strategy each runs, in index order."""
    found: dict[str, dict[str, Any]] = {}
    for s in slices:
        for d in (s.get("spec") or {}).get("devices") or []:
            attrs = d.get("attributes") or {}
            parent = _attr(attrs, "parentUUID") or _attr(attrs, "uuid")
            if not parent:
                continue
            entry = found.setdefault(parent, {"types": set(), "attrs": attrs})
            entry["types"].add(_attr(attrs, "type") or names.TYPE_GPU)
    out = []
    for uuid, entry in found.items():
        attrs, types = entry["attrs"], entry["types"]
        strategy = (
            names.STRATEGY_MIG
            if names.TYPE_MIG in types
            else _STRATEGY_OF_TYPE.get(min(types), names.STRATEGY_EXCLUSIVE)
        )
        index = int(_attr(attrs, "index") or 0)
        key = key_for_product(str(_attr(attrs, "productName") or ""))
        if key is None:
            gpu = Gpu(
                uuid=uuid,
                index=index,
                minor=int(_attr(attrs, "minor") or index),
                product=str(_attr(attrs, "productName") or ""),
                memory_bytes=0,
                multiprocessors=0,
                architecture="",
                cuda_compute_capability="0.0",
                driver_version="0.0",
                cuda_driver_version="0.0",
                pci_bus_id=str(_attr(attrs, PCI_BUS_ID_ATTRIBUTE) or ""),
            )
            out.append(PublishedGpu(gpu, strategy, False))
            continue
        base = fake_gpu(key, index, node)
        gpu = dataclasses.replace(
            base,
            uuid=uuid,
            minor=int(_attr(attrs, "minor") if _attr(attrs, "minor") is not None else index),
            pci_bus_id=str(_attr(attrs, PCI_BUS_ID_ATTRIBUTE) or base.pci_bus_id),
            driver_version=str(_attr(attrs, "driverVersion") or base.driver_version),
            cuda_driver_version=str(_attr(attrs, "cudaDriverVersion") or base.cuda_driver_version),
        )
        out.append(PublishedGpu(gpu, strategy, True))
    return sorted(out, key=lambda p: p.gpu.index)


def claim_devices(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """(pool, device) of each allocation result of carve's driver."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return [(r.get("pool", ""), r.get("device", "")) for r in results if r.get("driver") == names.DRIVER_NAME]


def device_gpus(slices: Iterable[dict[str, Any]]) -> dict[str, str]:
    """device name -> physical GPU uuid, for one node's slices."""
    out = {}
    for s in slices:
        for d in (s.get("spec") or {}).get("devices") or []:
            attrs = d.get("attributes") or {}
            parent = _attr(attrs, "parentUUID") or _attr(attrs, "uuid")
            if parent:
                out[d["name"]] = str(parent)
    return out


@dataclass
class NodeState:
    """One node for the planner. `busy` GPUs (an allocated or prepared claim, or a change in flight) are
    never changed. `version` grows with every change to the state, so caches keyed on it stay valid."""

    name: str
    gpus: list[PublishedGpu]
    labels: dict[str, str] = field(default_factory=dict)
    allocated: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> claim with allocation
    busy: set[str] = field(default_factory=set)  # GPU uuids
    pinned: set[str] = field(default_factory=set)  # GPU uuids whose strategy the admin set: never changed
    home: str | None = None  # where idle GPUs return: the plugins' bare default rule (None: the policy's)
    paused: bool = False
    settings: Settings = field(default_factory=Settings)
    slices: list[dict[str, Any]] | None = None
    allocator: Allocator | None = None
    version: int = 0
    _signature: tuple[int, str] | None = field(default=None, repr=False, compare=False)
    _types: dict[tuple[int, int, bool], frozenset[str]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def signature(self) -> str:
        """What decides which claims fit here, without the names: GPU models, strategies, which are busy,
        and what the allocated claims hold (device names repeat from node to node). Two nodes with one
        signature accept the same claims, so a claim that fits neither need not be tried on both."""
        if self._signature is None or self._signature[0] != self.version:
            held = sorted(
                json.dumps([r.get("device"), r.get("consumedCapacity")], sort_keys=True)
                for c in self.allocated.values()
                for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                    "results"
                )
                or []
            )
            gpus = [(p.gpu.product, p.strategy, p.gpu.uuid in self.busy, p.modelled) for p in self.gpus]
            self._signature = (self.version, json.dumps([gpus, held]))
        return self._signature[1]

    @property
    def pinned_indices(self) -> set[int]:
        return {p.gpu.index for p in self.gpus if p.gpu.uuid in self.pinned}

    @property
    def strategies(self) -> dict[int, str]:
        return {p.gpu.index: p.strategy for p in self.gpus}

    def types(self, idle_only: bool = False) -> frozenset[str]:
        """Device types a new claim could still get here (idle GPUs, or any GPU that shares)."""
        # Asked once per node per pending claim: kept while nothing it depends on changed (strategies
        # and bookings bump `version`; `busy` only grows).
        key = (self.version, len(self.busy), idle_only)
        cached = self._types.get(key)
        if cached is not None:
            return cached
        out: set[str] = set()
        for p in self.gpus:
            if p.gpu.uuid not in self.busy or (not idle_only and p.strategy in SHARED):
                out |= TYPES.get(p.strategy, frozenset())
        self._types = {k: v for k, v in self._types.items() if k[:2] == key[:2]}
        self._types[key] = frozenset(out)
        return self._types[key]

    def current(self, classes: list[dict[str, Any]]) -> Allocator:
        """The allocator over the node as it is (built once, then kept current by record())."""
        if self.allocator is None:
            self.allocator = Allocator(self.current_slices(), classes)
            for claim in self.allocated.values():
                self.allocator.add_allocated(claim)
        return self.allocator

    def build(self, strategies: dict[int, str]) -> list[dict[str, Any]]:
        modelled = [p.gpu for p in self.gpus if p.modelled]
        return build_slices(
            self.name, modelled, strategies, self.settings, k8s_version=WHAT_IF_VERSION, validate=False
        )

    def what_if(self, changes: dict[int, str], classes: list[dict[str, Any]]) -> Allocator:
        """An allocator over the node with `changes` (GPU index -> strategy) applied and every allocated
        claim recorded. Only idle GPUs change, so every recorded device still exists."""
        allocator = Allocator(self.build({**self.strategies, **changes}), classes)
        for claim in self.allocated.values():
            allocator.add_allocated(claim)
        return allocator

    def apply(self, changes: dict[int, str], allocator: Allocator | None) -> None:
        """Adopt a what-if: the GPUs run their new strategies, `allocator` (None: built when needed)
        is the node's from now on."""
        self.gpus = [dataclasses.replace(p, strategy=changes.get(p.gpu.index, p.strategy)) for p in self.gpus]
        self.slices = None
        self.allocator = allocator
        self.version += 1

    def record(self, claims: list[dict[str, Any]], allocations: list[dict[str, Any]]) -> None:
        """Count claims as allocated here (what the planner expects the scheduler to do): their GPUs
        become busy, so no later change of the same plan touches them."""
        by_minor = {p.gpu.minor: p.gpu.uuid for p in self.gpus}
        for claim, allocation in zip(claims, allocations, strict=True):
            uid = claim["metadata"]["uid"]
            self.allocated[uid] = {**claim, "status": {"allocation": allocation}}
            for r in allocation["devices"]["results"]:
                m = _GPU_NAME.match(r["device"])  # every carve device is named gpu-<minor>[-...]
                if m and int(m.group(1)) in by_minor:
                    self.busy.add(by_minor[int(m.group(1))])
        self.version += 1

    def current_slices(self) -> list[dict[str, Any]]:
        if self.slices is None:
            self.slices = self.build(self.strategies)
        return self.slices


def try_allocate(
    allocator: Allocator, node: str, claims: list[dict[str, Any]], keep: bool
) -> list[dict[str, Any]] | None:
    """Allocate every claim of a group on `node`, or none; with keep the claims stay recorded."""
    done: list[tuple[str, dict[str, Any]]] = []
    for claim in claims:
        try:
            allocation = allocator.allocate(claim, node=node, explain=False)
        except (Unallocatable, ValueError):
            for uid, _ in done:
                allocator.remove_allocated(uid)
            return None
        allocator.add_allocated({**claim, "status": {"allocation": allocation}})
        done.append((claim["metadata"]["uid"], allocation))
    if not keep:
        for uid, _ in done:
            allocator.remove_allocated(uid)
    return [a for _, a in done]
