"""The devices this node publishes, indexed by name: what prepare needs to know about an allocated device.

Built from the ResourceSlices the plugin itself published (after any feature-detection fallback), so the
plugin interprets an allocation exactly as the scheduler saw the device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from driver import names
from driver.allocator import quantity
from driver.devices.attributes import PCI_BUS_ID_ATTRIBUTE

_GPU_NAME = re.compile(r"^gpu-(\d+)")


@dataclass(frozen=True)
class NodeDevice:
    name: str
    type: str  # gpu | vgpu | slot | mig | timeslice | mps
    gpu_uuid: str  # the physical GPU (parentUUID)
    minor: int
    capacity: dict[str, int] = field(default_factory=dict)  # whole-device capacity, parsed quantities
    profile: str | None = None  # MIG profile name (NVML form, e.g. "1g.10gb")
    placement_start: int | None = None
    pci_bus_id: str = ""  # "0000:41:00.0", lower case; CUDA_DEVICE_ORDER=PCI_BUS_ID orders by it
    mig_capable: bool = False  # a non-MIG device of such a GPU needs MIG mode off (Preparer)
    memory_enforcement: str = names.MEMORY_ENFORCEMENT_LIMITER  # shareable devices: driver | limiter

    @property
    def is_mig(self) -> bool:
        return self.type == names.TYPE_MIG

    @property
    def is_limited(self) -> bool:
        """Soft slices, slots and MPS shares run under the limiter (for memory a second line where the
        driver enforces it; for cores and reporting always)."""
        return self.type in (names.TYPE_VGPU, names.TYPE_SLOT, names.TYPE_MPS)

    @property
    def is_mps(self) -> bool:
        return self.type == names.TYPE_MPS

    @property
    def driver_enforced(self) -> bool:
        """The driver partitions this share's memory (the hook sets the container cgroup's limits)."""
        return self.memory_enforcement == names.MEMORY_ENFORCEMENT_DRIVER


def _attr(attributes: dict, key: str):
    raw = attributes.get(key)
    if raw is None:
        raw = attributes.get(f"{names.DRIVER_NAME}/{key}")
    if not isinstance(raw, dict) or not raw:
        return None
    return next(iter(raw.values()))


def quantity_int(value: object) -> int:
    """A Kubernetes quantity ("4Gi", "30", 512) as an int, rounded up (capacity is never under-counted)."""
    try:
        return quantity.of(value if isinstance(value, int) else str(value)).ceil_int()
    except quantity.QuantityError as e:
        raise ValueError(str(e)) from None


def device_from_slice(dev: dict) -> NodeDevice:
    attrs = dev.get("attributes") or {}
    minor = _attr(attrs, "minor")
    if minor is None:
        m = _GPU_NAME.match(dev["name"])
        minor = int(m.group(1)) if m else -1
    capacity = {k: quantity_int(v.get("value", 0)) for k, v in (dev.get("capacity") or {}).items()}
    return NodeDevice(
        name=dev["name"],
        type=str(_attr(attrs, "type") or names.TYPE_GPU),
        gpu_uuid=str(_attr(attrs, "parentUUID") or _attr(attrs, "uuid") or ""),
        minor=int(minor),
        capacity=capacity,
        profile=_attr(attrs, "profile"),
        placement_start=_attr(attrs, "placementStart"),
        pci_bus_id=str(_attr(attrs, PCI_BUS_ID_ATTRIBUTE) or "").lower(),
        mig_capable=_attr(attrs, "migCapable") is True,
        memory_enforcement=str(
            _attr(attrs, names.MEMORY_ENFORCEMENT_ATTRIBUTE) or names.MEMORY_ENFORCEMENT_LIMITER
        ),
    )


def catalog_from_slices(slices: list[dict]) -> dict[str, NodeDevice]:
    out: dict[str, NodeDevice] = {}
    for s in slices:
        for dev in s.get("spec", {}).get("devices") or []:
            out[dev["name"]] = device_from_slice(dev)
    return out
