"""The one place the legacy shim turns limits into container edits: through the DRA preparer's own builder.

`allocation_spec` calls `claim_edits` (driver/plugin/edits.py), the builder the DRA preparer uses, with one
device per assigned GPU, and writes the result with `claim_spec` exactly as the preparer does.
`write_allocation_files` writes the allocation's region and limits file as the preparer writes a claim's
(`Preparer._write_claim_files`: the limiter and its preload hook must exist, then the region and limits).
When edits.py changes again, this module is the only one to re-point; nothing else in driver/legacy
builds edits.
"""

from __future__ import annotations

from pathlib import Path

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from driver import names
from driver.cdi.spec import ContainerEdits, claim_spec
from driver.fsutil import ensure_private_dir
from driver.limits import ClaimLimits, create_region, write_limits
from driver.plugin.edits import ClaimDevice, ClaimFiles, HostLayout, claim_edits


def write_allocation_files(files: ClaimFiles, limiter_dir: Path, limits: ClaimLimits) -> None:
    """The region (usage accounting) and the limits file (the limiter's authority on limits, mounted
    read-only), as Preparer._write_claim_files writes a claim's."""
    for needed in (names.LIMITER_LIBRARY, names.HOOK_BINARY):
        path = Path(limiter_dir) / needed
        if not path.is_file():
            raise FileNotFoundError(f"limiter: {path} does not exist (set --limiter-dir)")
    ensure_private_dir(files.root.parent)
    ensure_private_dir(files.root)
    # The region directory is mounted into the container, which may run as any uid.
    files.region_dir.mkdir(mode=0o755, exist_ok=True)
    files.region_dir.chmod(0o755)
    create_region(files.region, limits)
    write_limits(files.limits, limits)


def allocation_spec(
    uid: str,
    cdi_names: list[str],
    layout: HostLayout,
    files: ClaimFiles,
    limiter_dir: Path,
    limits: ClaimLimits,
    minors: list[int],
) -> dict:
    """The CDI spec of one allocation: one CDI device per GPU (in `minors` order), limiter edits common."""
    devices = [ClaimDevice(name, minor) for name, minor in zip(cdi_names, minors, strict=True)]
    edits = claim_edits(layout, devices, limits, files, limiter_dir)
    return claim_spec(uid, edits.devices, edits.common)


def container_response(edits: ContainerEdits) -> pb.ContainerAllocateResponse:
    """The same edits in the AllocateResponse's own fields (envs, mounts, device specs), for callers that
    cannot use CDI. Hooks have no place there; kept next to the spec builder so both wire formats come from
    one ContainerEdits. Not used by the device plugin today (docs/legacy.md, "Not done yet")."""
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
