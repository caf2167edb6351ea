"""Where a GPU sits on the host: its PCIe root complex and NUMA node, the inputs of the standard DRA
attributes `resource.kubernetes.io/pcieRoot` and `resource.kubernetes.io/numaNode` (docs/devices.md,
"Topology").

The PCIe root is read from sysfs exactly as Kubernetes' own helper does
(k8s.io/dynamic-resource-allocation/deviceattribute, GetPCIeRootAttributeByPCIBusID at v1.37.2): the link
`bus/pci/devices/<bus id>` resolves to `devices/pci<domain>:<bus>/.../<bus id>`, and the first component,
`pci<domain>:<bus>`, is the root complex. NVML has no call for it. The NUMA node comes from NVML
(nvmlDeviceGetMemoryAffinity, scope NODE: the node whose memory is nearest), since that is the driver's
own answer and works inside a container whose sysfs hides the host's.

Fake GPUs have bus ids no sysfs knows: `write_fake_sysfs` lays out a stand-in tree (one root complex per
GPU, the GPU on the bus below its root port, `numa_node` beside it) so the real reading path runs on them.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

_BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f])$")


def pcie_root(sysfs: Path, bus_id: str) -> str | None:
    """`pci<domain>:<bus>` of the root complex above `bus_id` ("0000:3b:00.0"), or None when sysfs has no
    such device or its link is not a PCI device path (then the attribute is left out, never guessed)."""
    if not _BDF.match(bus_id):
        return None
    link = Path("bus") / "pci" / "devices" / bus_id
    try:
        target = os.readlink(sysfs / link)
    except OSError:
        return None
    resolved = (
        os.path.normpath(os.path.join(str(link.parent), target)) if not os.path.isabs(target) else target
    )
    parts = Path(resolved).parts
    if len(parts) < 3 or parts[0] != "devices" or not parts[1].startswith("pci") or parts[-1] != bus_id:
        return None
    return parts[1]


def numa_node(node_mask: Iterable[int]) -> int | None:
    """The lowest NUMA node set in NVML's node bitmask (64 nodes per word), None when none is set
    (a device with no NUMA affinity must not publish the attribute, as the Kubernetes helper says)."""
    for word_index, word in enumerate(node_mask):
        word = int(word)
        if word:
            return word_index * 64 + (word & -word).bit_length() - 1
    return None


def write_fake_sysfs(root: Path, devices: Iterable[tuple[str, int | None]]) -> Path:
    """A sysfs stand-in for fake GPUs (bus id, NUMA node): the device directory
    `devices/pci<dom>:<root bus>/<dom>:<root bus>:00.0/<bus id>` with `numa_node`, and the link
    `bus/pci/devices/<bus id>` to it, relative as the kernel makes it. The root port's bus is the one just
    below the GPU's, so each fake GPU has a root complex of its own."""
    links = root / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    for bus_id, node in devices:
        m = _BDF.match(bus_id)
        if not m:
            continue
        domain, bus = m.group(1), int(m.group(2), 16)
        root_bus = f"{max(bus - 1, 0):02x}"
        rel = Path("devices") / f"pci{domain}:{root_bus}" / f"{domain}:{root_bus}:00.0" / bus_id
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "numa_node").write_text(f"{-1 if node is None else node}\n")
        # Processes of one fake topology share the tree: a link another one made first is the same link.
        with contextlib.suppress(FileExistsError):
            (links / bus_id).symlink_to(Path("..") / ".." / ".." / rel)
    return root
