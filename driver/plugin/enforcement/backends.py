"""Which backend enforces the memory of each shareable GPU: the driver's per-cgroup partition or the limiter.

Pure rule plus one small probe of the node:
- a GPU can use `driver` when the driver's NVML has the memory-limits API and does not answer NOT_SUPPORTED
  (Gpu.memory_limits, probed by driver/gpu), the GPU is not in MIG mode (MIG handles are refused), and the
  node runs cgroup v2: the unified hierarchy, or a hybrid host's v2 mount (its "0::" line in
  /proc/self/cgroup) - the hook sets the limits on the container's v2 directory;
- `--memory-enforcement auto` takes `driver` wherever it can and `limiter` elsewhere; `driver` insists and
  fails the plugin's start naming each GPU that cannot; `limiter` never uses the driver.
The choice is published as the devices' `memoryEnforcement` attribute (driver/devices/attributes.py) and
read back at prepare from the node's own slices, so prepare does what the scheduler saw.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from driver import names
from driver.gpu.model import Gpu

MODES = (names.MEMORY_ENFORCEMENT_AUTO, names.MEMORY_ENFORCEMENT_DRIVER, names.MEMORY_ENFORCEMENT_LIMITER)


class EnforcementError(ValueError):
    """--memory-enforcement cannot be honoured; the message names the flag, the GPU and why."""


@dataclass(frozen=True)
class CgroupV2:
    """Where the node's cgroup v2 hierarchy is mounted, as the host names it (the hook's --cgroup-root)."""

    mount: str  # "/sys/fs/cgroup" (unified) or e.g. "/sys/fs/cgroup/unified" (hybrid)


def probe_cgroup_v2(proc_root: Path = Path("/proc")) -> CgroupV2 | None:
    """The node's cgroup v2 mount, or None on a cgroup v1-only node.

    Reads the plugin's own /proc/self/cgroup ("0::" line: the process is in the v2 hierarchy) and
    /proc/self/mountinfo (the first cgroup2 mount). The plugin runs in the host's cgroup namespace (the
    DaemonSet's hostPID and the host /sys/fs/cgroup), so these are the host's.
    """
    try:
        cgroups = (proc_root / "self" / "cgroup").read_text()
        mountinfo = (proc_root / "self" / "mountinfo").read_text()
    except OSError:
        return None
    if not any(line.startswith("0::") for line in cgroups.splitlines()):
        return None
    for line in mountinfo.splitlines():
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split(" ", 1)[0] == "cgroup2":
            return CgroupV2(mount=fields[0].split()[4])
    return None


def driver_capable(gpu: Gpu, cgroup: CgroupV2 | None) -> str:
    """ "" when the driver can partition `gpu`'s memory on this node, else why not (one phrase)."""
    if not gpu.memory_limits:
        return f"its driver {gpu.driver_version} has no per-cgroup memory limits (NVML answers NOT_SUPPORTED)"
    if gpu.mig_enabled:
        return "it is in MIG mode (the driver refuses memory limits on MIG devices)"
    if cgroup is None:
        return "the node has no cgroup v2 hierarchy (cgroup v1 only)"
    return ""


def choose(mode: str, gpus: Iterable[Gpu], cgroup: CgroupV2 | None) -> frozenset[str]:
    """UUIDs of the GPUs whose shares the driver enforces under `mode`; EnforcementError for `driver`
    on a GPU that cannot, and for an unknown mode."""
    if mode not in MODES:
        raise EnforcementError(f"--memory-enforcement {mode!r}: expected one of {', '.join(MODES)}")
    if mode == names.MEMORY_ENFORCEMENT_LIMITER:
        return frozenset()
    chosen = set()
    refused = []
    for gpu in gpus:
        why = driver_capable(gpu, cgroup)
        if not why:
            chosen.add(gpu.uuid)
        elif mode == names.MEMORY_ENFORCEMENT_DRIVER:
            refused.append(f"{gpu.name} ({gpu.product}): {why}")
    if refused:
        raise EnforcementError(
            "--memory-enforcement driver: " + "; ".join(refused) + " (use auto to fall back to the limiter)"
        )
    return frozenset(chosen)
