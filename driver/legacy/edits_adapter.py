"""The one place the legacy shim turns limits into container edits: through the DRA preparer's own builders.

`allocation_spec` composes exactly what the preparer gives a soft claim (driver/plugin/edits.py:
`HostLayout.base_edits`, `limiter_edits`, `HostLayout.gpu_nodes`) into the CDI spec of one allocation.
`write_allocation_files` writes the allocation's region and ld.so.preload as the preparer writes a claim's
(`Preparer._write_claim_files`). When edits.py changes (driver-file discovery, CDI hooks, a read-only limits
file), this module is the only one to re-point; nothing else in driver/legacy builds edits.
"""

from __future__ import annotations

from pathlib import Path

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from driver import names
from driver.cdi.spec import CdiDevice, ContainerEdits, claim_spec
from driver.fsutil import ensure_private_dir, write_atomic
from driver.limits import ClaimLimits, create_region
from driver.plugin.edits import ClaimFiles, HostLayout, limiter_edits


def write_allocation_files(files: ClaimFiles, limiter_dir: Path, limits: ClaimLimits) -> None:
    """Region (the limiter's authority on limits) and ld.so.preload, as Preparer._write_claim_files does."""
    limiter = Path(limiter_dir) / names.LIMITER_LIBRARY
    if not limiter.is_file():
        raise FileNotFoundError(f"limiter: {limiter} does not exist (set --limiter-dir)")
    ensure_private_dir(files.root.parent)
    ensure_private_dir(files.root)
    files.region_dir.mkdir(mode=0o755, exist_ok=True)
    files.region_dir.chmod(0o755)
    create_region(files.region, limits)
    write_atomic(files.preload, (names.LIMITER_CONTAINER_PATH + "\n").encode(), mode=0o644)


def allocation_edits(
    layout: HostLayout, files: ClaimFiles, limiter_dir: Path, limits: ClaimLimits
) -> ContainerEdits:
    """What every container of the allocation gets besides its GPUs' nodes (the preparer's `common`)."""
    return layout.base_edits().merged(limiter_edits(files, limiter_dir, limits))


def allocation_spec(
    uid: str,
    device: str,
    layout: HostLayout,
    files: ClaimFiles,
    limiter_dir: Path,
    limits: ClaimLimits,
    minors: list[int],
) -> dict:
    nodes = ContainerEdits()
    for minor in minors:
        nodes = nodes.merged(ContainerEdits(device_nodes=layout.gpu_nodes(minor)))
    common = allocation_edits(layout, files, limiter_dir, limits)
    return claim_spec(uid, [CdiDevice(names.cdi_device_name(uid, device), nodes)], common)


def container_response(edits: ContainerEdits) -> pb.ContainerAllocateResponse:
    """The same edits in the AllocateResponse's own fields (envs, mounts, device specs), for callers that
    cannot use CDI; kept next to the spec builder so both wire formats come from one ContainerEdits."""
    envs = dict(e.split("=", 1) for e in edits.env)
    mounts = [
        pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only="rw" not in m.options)
        for m in edits.mounts
    ]
    devices = [
        pb.DeviceSpec(
            container_path=n.path, host_path=n.host_path or n.path, permissions=n.permissions or "rw"
        )
        for n in edits.device_nodes
    ]
    return pb.ContainerAllocateResponse(envs=envs, mounts=mounts, devices=devices)
