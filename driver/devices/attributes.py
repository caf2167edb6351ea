"""Device attributes and capacity values in ResourceSlice form: the parts every strategy shares.

Attribute names are plain identifiers: in CEL they resolve to the driver's domain
(`device.attributes["gpu.carve.dev"].productName`). The exceptions are the Kubernetes-standard
`resource.kubernetes.io/pciBusID`, `pcieRoot` and `numaNode`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from driver.devices.base import ModelError
from driver.gpu.model import Gpu
from driver.names import MEMORY_ENFORCEMENT_ATTRIBUTE

PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
# Standard topology attributes (k8s.io/dynamic-resource-allocation/deviceattribute, v1.37.2): a string
# "pci<domain>:<bus>", and an int. A claim can `matchAttribute` them across drivers (a GPU and a NIC).
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
NUMA_NODE_ATTRIBUTE = "resource.kubernetes.io/numaNode"

_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_SUFFIX_VALUE = {
    **dict(_BINARY_SUFFIXES),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$")
_VERSION = re.compile(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*$")


def quantity(value: int) -> str:
    """Bytes or counts as a Kubernetes quantity: the largest exact binary suffix, else a plain integer.

    80 GiB -> "80Gi", 81559 MiB -> "81559Mi", 100 -> "100" (counts are never given binary suffixes
    unless they happen to be exact multiples of 1024, which is still the same value).
    """
    if value < 0:
        raise ModelError(f"quantity: negative value {value}")
    if value >= 1024:
        for suffix, unit in _BINARY_SUFFIXES:
            if value % unit == 0:
                return f"{value // unit}{suffix}"
    return str(value)


@lru_cache(maxsize=4096)  # slices repeat the same few values thousands of times
def quantity_bytes(text: str, what: str) -> int:
    """A quantity of bytes >= 0 ("512Mi" -> 536870912); ModelError naming `what` (a flag or field) if not."""
    try:
        value = parse_quantity(text)
    except ValueError as e:
        raise ModelError(f"{what}: {e}, e.g. '512Mi'") from None
    if value < 0 or value.denominator != 1:
        raise ModelError(f"{what} {text!r}: must be a whole number of bytes >= 0")
    return int(value)


def parse_quantity(text: str) -> Fraction:
    """A Kubernetes quantity string as an exact number ("256Mi" -> 268435456); ValueError if malformed."""
    m = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if not m or (m.group(4) or "") not in _SUFFIX_VALUE:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    sign, digits, exponent, suffix = m.groups()
    value = Fraction(digits) * (
        Fraction(10) ** int(exponent[1:]) if exponent else _SUFFIX_VALUE[suffix or ""]
    )
    return -value if sign == "-" else value


def semver(version: str, what: str = "version") -> str:
    """NVML version strings as semver 2.0: "8.0" -> "8.0.0", "580.95.05" -> "580.95.5" (no leading zeros)."""
    m = _VERSION.match(version or "")
    if not m:
        raise ModelError(f"{what}: {version!r} is not a dotted version (expected e.g. 580.95.05)")
    return ".".join(str(int(part or 0)) for part in m.groups())


def string(value: str) -> dict[str, Any]:
    return {"string": value}


def common_attributes(gpu: Gpu, device_type: str) -> dict[str, Any]:
    """Attributes every device of `gpu` carries, whatever the strategy.

    `uuid` and `parentUUID` are both the physical GPU's UUID on every device: a selector or a
    `matchAttribute: gpu.carve.dev/parentUUID` constraint then means "same physical GPU" for whole GPUs,
    slots, soft shares and MIG devices alike. (A MIG device's own MIG-... UUID exists only once the
    instance is created at prepare time; it goes into the container's environment, not the slice.)
    """
    return {
        "type": string(device_type),
        "uuid": string(gpu.uuid),
        "parentUUID": string(gpu.uuid),
        "productName": string(gpu.product),
        "architecture": string(gpu.architecture),
        "cudaComputeCapability": {
            "version": semver(gpu.cuda_compute_capability, f"{gpu.name}.cudaComputeCapability")
        },
        "driverVersion": {"version": semver(gpu.driver_version, f"{gpu.name}.driverVersion")},
        "cudaDriverVersion": {"version": semver(gpu.cuda_driver_version, f"{gpu.name}.cudaDriverVersion")},
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor},
        "migCapable": {"bool": gpu.mig_capable},
        PCI_BUS_ID_ATTRIBUTE: string(gpu.pci_bus_id),
        **({PCIE_ROOT_ATTRIBUTE: string(gpu.pcie_root)} if gpu.pcie_root else {}),
        **({NUMA_NODE_ATTRIBUTE: {"int": gpu.numa_node}} if gpu.numa_node is not None else {}),
    }


def fixed_capacity(memory: int, multiprocessors: int, cores: int = 100) -> dict[str, Any]:
    """Capacity of a device that is allocated whole: memory bytes, SMs, and cores in percent."""
    return {
        "memory": {"value": quantity(memory)},
        "multiprocessors": {"value": str(multiprocessors)},
        "cores": {"value": str(cores)},
    }


def enforcement_attributes(gpu: Gpu, settings: Any) -> dict[str, Any]:
    """`memoryEnforcement` of a shareable device: `driver` (the driver's per-cgroup memory partition) or
    `limiter` (carve's LD_PRELOAD limiter), so a class or claim can require the driver with CEL."""
    return {MEMORY_ENFORCEMENT_ATTRIBUTE: string(settings.memory_enforcement(gpu))}
