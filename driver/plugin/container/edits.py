"""A claim's container edits: the one function that builds them, and the limiter's part of them.

`claim_edits` is what both the DRA preparer and the legacy device plugin use: from the claim's devices
and limits to the spec-level edits and one set of edits per device. Host knowledge (device nodes, driver
files, hooks) comes from `HostLayout` (driver/plugin/container/hostlayout.py).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from driver import names
from driver.cdi.spec import CdiDevice, ContainerEdits, DeviceNode, Hook, Mount
from driver.fsutil import PER_BOOT, write_atomic
from driver.limits import ClaimLimits, limiter_env
from driver.limits.mounts import MountError, limits_source
from driver.plugin.container.driverfiles import DriverFilesError
from driver.plugin.container.hostlayout import HostLayout
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

__all__ = ["ClaimDevice", "ClaimEdits", "ClaimFiles", "DriverFilesError", "HostLayout", "claim_edits"]

# Each claim's files are mounted under /var/run/carve/<claim-uid>, so two soft claims in one container never
# mount onto the same path (see docs/plugin.md, "Several soft claims in one container"): the region file
# read-write (usage accounting only) and the limits directory read-only (what the limiter enforces).
REGION_CONTAINER_DIR = "/var/run/carve"
REGION_FILE = "region"
LIMITS_DIR = "limits"
LIMITS_FILE = "limits"
# The limiter indexes limits by CUDA ordinal; PCI order is the one the plugin can predict (claim_limits).
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER=PCI_BUS_ID"


def region_container_path(claim_uid: str) -> str:
    """CARVE_REGION for a claim: its region file as the claim's containers see it."""
    return f"{REGION_CONTAINER_DIR}/{claim_uid}/{REGION_FILE}"


@dataclass(frozen=True)
class ClaimFiles:
    """The per-claim directory <plugin-dir>/claims/<uid> (0700): the shared region (the one file a container
    may write, fixed-size) and the plugin-owned limits directory (read-only to containers)."""

    root: Path

    @property
    def region_dir(self) -> Path:
        return self.root / "region"

    @property
    def region(self) -> Path:
        return self.region_dir / REGION_FILE

    @property
    def limits_dir(self) -> Path:
        return self.root / LIMITS_DIR

    @property
    def limits(self) -> Path:
        return self.limits_dir / LIMITS_FILE

    @property
    def limits_source(self) -> Path:
        """The limiter's trust anchor, mounted read-only at names.LIMITS_SOURCE_CONTAINER_PATH."""
        return self.root / names.LIMITS_SOURCE_FILE


_LIMITS_SOURCES: dict[tuple, str] = {}


def _limits_source(claims_dir: Path) -> str:
    """limits_source(), remembered per claims directory and the filesystem it is on: mountinfo has a line
    per claim's region tmpfs, so parsing it at every prepare grows with the claims on the node. A mount over
    the directory (another filesystem) changes st_dev and so asks again; the path as given, not its
    realpath (an lstat per component in Python, at every prepare): a symlink in it pointed elsewhere changes
    the (st_dev, st_ino) that os.stat follows it to."""
    try:
        st = os.stat(claims_dir)
    except OSError:
        return limits_source(claims_dir)  # not there yet: nothing to remember it by
    key = (str(claims_dir), st.st_dev, st.st_ino)
    found = _LIMITS_SOURCES.get(key)
    if found is None:
        found = _LIMITS_SOURCES[key] = limits_source(claims_dir)
    return found


def limiter_edits(files: ClaimFiles, limiter_dir: Path, limits: ClaimLimits) -> ContainerEdits:
    """Mounts, env and the preload hook that put the claim's processes under the limiter.

    The region file goes where `limits.region_path` says (region_container_path of the claim), read-write:
    only the file, so a container gets no writable host directory and cannot delete or replace it (a mount
    point). The limits directory goes next to it, read-only: the limiter reads <region dir>/limits/limits.
    A directory, not the file, so the plugin's atomic rewrites (a new inode) reach running containers.
    CARVE_LIMITS_SOURCE (driver/limits/mounts.py) lets the limiter tell this mount from one the pod made; it
    also goes in a file of the claim's directory, mounted read-only beside the limiter, which the limiter
    reads instead of the variable (a process chooses its children's environment, not its mounts).
    The image's own /etc/ld.so.preload is kept: carve-cdi-hook (installed in `limiter_dir`) puts the
    limiter's line first in the container's file instead of a mount hiding the image's lines.
    """
    env = limiter_env(limits)
    limits_at = Path(limits.region_path).parent / LIMITS_DIR
    if limits_at.parent.name != files.root.name:
        # the limiter recognises the plugin's mount by <claims dir root>/<this name>/limits (limits.c)
        raise ValueError(
            f"limiter_edits: {limits.region_path} is not under a directory named {files.root.name}"
        )
    read_only = ("ro", "nosuid", "nodev", "noexec", "bind")
    anchor: tuple[Mount, ...] = ()
    try:
        source = env[names.ENV_LIMITS_SOURCE] = _limits_source(files.root.parent)
        if files.root.is_dir():  # the claim's directory is made (edits built without it have no anchor file)
            write_atomic(files.limits_source, f"{source}\n".encode(), mode=0o444, durable=PER_BOOT)
            anchor = (Mount(str(files.limits_source), names.LIMITS_SOURCE_CONTAINER_PATH, read_only),)
    except MountError as e:
        # Without it the limiter trusts no limits file: the plugin's still holds among untrusted ones (the
        # tightest wins), but a read-only file of the pod's own could not be told from it.
        event(log, logging.WARNING, "limits.source-unknown", claims_dir=str(files.root.parent), error=str(e))
    return ContainerEdits(
        env=(*(f"{k}={v}" for k, v in sorted(env.items())), DEVICE_ORDER_ENV),
        mounts=(
            Mount(str(Path(limiter_dir) / names.LIMITER_LIBRARY), names.LIMITER_CONTAINER_PATH),
            *anchor,
            Mount(str(files.region), limits.region_path, ("rw", "nosuid", "nodev", "noexec", "bind")),
            Mount(str(files.limits_dir), str(limits_at), read_only),
        ),
        hooks=(preload_hook(limiter_dir),),
    )


def preload_hook(limiter_dir: Path) -> Hook:
    """The createContainer hook that merges the limiter into the container's /etc/ld.so.preload."""
    hook = Path(limiter_dir) / names.HOOK_BINARY
    args = (names.HOOK_BINARY, "preload", "--library", names.LIMITER_CONTAINER_PATH)
    return Hook(path=str(hook), args=args)


@dataclass(frozen=True)
class ClaimDevice:
    """One allocated device as the edits need it: its CDI name and the GPU (and MIG instance) behind it."""

    cdi_name: str  # <claim-uid>-<device>[-<shareID>]
    gpu_minor: int
    gpu_instance_id: int | None = None  # both set for a MIG device
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class ClaimEdits:
    common: ContainerEdits  # the spec-level edits: driver files, control nodes, hooks, limiter
    devices: tuple[CdiDevice, ...]  # one per allocated device: its device nodes


def claim_edits(
    layout: HostLayout,
    devices: Sequence[ClaimDevice],
    limits: ClaimLimits | None = None,
    files: ClaimFiles | None = None,
    limiter_dir: Path | None = None,
) -> ClaimEdits:
    """Everything a claim's containers get, from its devices and (soft slices, slots) its limits.

    The one builder of container edits: the DRA preparer writes the result as a CDI spec
    (driver.cdi.spec.claim_spec), the legacy device plugin answers Allocate from the same value.
    Raises DriverFilesError naming a required node, library or capability file that is missing.
    """
    common = layout.driver_edits()
    if limits is not None:
        if files is None or limiter_dir is None:
            raise ValueError("claim_edits: limits need the claim's files and the limiter dir")
        common = common.merged(limiter_edits(files, limiter_dir, limits))
    per_device = []
    for d in devices:
        if d.gpu_instance_id is not None and d.compute_instance_id is not None:
            nodes = layout.mig_nodes(d.gpu_minor, d.gpu_instance_id, d.compute_instance_id)
        else:
            nodes = layout.gpu_nodes(d.gpu_minor)
        per_device.append(CdiDevice(d.cdi_name, _device_edits(d, nodes)))
    return ClaimEdits(common, tuple(per_device))


def _device_edits(device: ClaimDevice, nodes: tuple[DeviceNode, ...]) -> ContainerEdits:
    if nodes:
        return ContainerEdits(device_nodes=nodes)
    # Only fake GPUs without /dev/nvidia* nodes get here. CDI refuses a device with no edits of its own
    # ("empty device edits", and containerd then fails the whole pod), so such a device names itself in
    # a variable instead: unique per CDI device, so claims sharing a container do not overwrite each other.
    name = re.sub(r"[^A-Z0-9]", "_", device.cdi_name.upper())
    return ContainerEdits(env=(f"CARVE_FAKE_DEVICE_{name}={device.cdi_name}",))
