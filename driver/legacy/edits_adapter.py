"""The one place the legacy shim turns limits into container edits: through the DRA preparer's own builder.

`allocation_spec` calls `claim_edits` (driver/plugin/edits.py), the builder the DRA preparer uses, with one
device per assigned GPU, and writes the result with `claim_spec` exactly as the preparer does.
The allocation's files (limiter check, directory, region) are written by driver/plugin/claimfiles.py's
`write_claim_files`, the preparer's own function. When edits.py changes again, this module is the only one
to re-point; nothing else in driver/legacy builds edits.
"""

from __future__ import annotations

from pathlib import Path

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from driver.cdi.spec import ContainerEdits, claim_spec
from driver.limits import ClaimLimits
from driver.plugin.edits import ClaimDevice, ClaimFiles, HostLayout, claim_edits


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
