"""MIG capability device nodes, fully specified from the kernel driver's files under the proc root.

A container needs /dev/nvidia-caps/nvidia-cap<N> of its MIG device's GPU instance and compute instance.
The nodes need not exist in the plugin's (or the host's) /dev: the CDI spec gives type, major, minor and
mode, and the runtime creates them in the container. The numbers come from
  <proc-root>/devices: "<major> nvidia-caps" among the character devices, and
  <proc-root>/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access: "DeviceFileMinor: N",
  "DeviceFileMode: M" (decimal).
"""

from __future__ import annotations

from pathlib import Path

from driver.cdi.spec import DeviceNode

CAPS_DEVICE = "nvidia-caps"


class MigCapsError(Exception):
    """A capability file that cannot be read or parsed; the message names it."""


def caps_major(proc_root: Path) -> int:
    """The major number of the nvidia-caps character device."""
    path = Path(proc_root) / "devices"
    try:
        text = path.read_text()
    except OSError as e:
        raise MigCapsError(f"{path}: {e.strerror or e}") from None
    section = ""
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            section = line.strip()
            continue
        parts = line.split()
        if section == "Character devices:" and parts[1:] == [CAPS_DEVICE] and parts[0].isdigit():
            return int(parts[0])
    raise MigCapsError(f"{path}: no '{CAPS_DEVICE}' among the character devices (is the driver loaded?)")


def _read_access(path: Path) -> tuple[int, int]:
    try:
        text = path.read_text()
    except OSError as e:
        raise MigCapsError(f"{path}: {e.strerror or e}") from None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        minor = int(fields["DeviceFileMinor"])
        mode = int(fields.get("DeviceFileMode", "438"))  # 0o666 when the driver does not say
    except (KeyError, ValueError):
        raise MigCapsError(f"{path}: no DeviceFileMinor: <number> line") from None
    if minor < 0 or not 0 <= mode <= 0o7777:
        raise MigCapsError(f"{path}: DeviceFileMinor {minor} / DeviceFileMode {mode} out of range")
    return minor, mode


def access_paths(proc_root: Path, gpu_minor: int, gpu_instance_id: int, compute_instance_id: int) -> tuple:
    base = Path(proc_root) / "driver/nvidia/capabilities" / f"gpu{gpu_minor}" / "mig" / f"gi{gpu_instance_id}"
    return base / "access", base / f"ci{compute_instance_id}" / "access"


def mig_cap_nodes(
    proc_root: Path, gpu_minor: int, gpu_instance_id: int, compute_instance_id: int
) -> tuple[DeviceNode, DeviceNode]:
    """The GPU instance's and the compute instance's capability nodes; MigCapsError if unreadable."""
    major = caps_major(proc_root)
    nodes = []
    for access in access_paths(proc_root, gpu_minor, gpu_instance_id, compute_instance_id):
        minor, mode = _read_access(access)
        nodes.append(
            DeviceNode(
                path=f"/dev/nvidia-caps/nvidia-cap{minor}",
                type="c",
                major=major,
                minor=minor,
                file_mode=mode,
            )
        )
    return nodes[0], nodes[1]
