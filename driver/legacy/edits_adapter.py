"""The one place the legacy shim turns limits into container edits: through the DRA preparer's own builder.

`allocation_spec` calls `claim_edits` (driver/plugin/container/edits.py), the builder the DRA preparer uses,
with one device per assigned GPU, and writes the result with `claim_spec` exactly as the preparer does.
The allocation's files (limiter check, directory, region) are written by
driver/plugin/container/claimfiles.py's `write_claim_files`, the preparer's own function. When edits.py
changes again, this module is the only one to re-point; nothing else in driver/legacy builds edits.
"""

from __future__ import annotations

from pathlib import Path

from driver.cdi.spec import claim_spec
from driver.limits import ClaimLimits
from driver.plugin.container.edits import ClaimDevice, ClaimFiles, HostLayout, claim_edits


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
