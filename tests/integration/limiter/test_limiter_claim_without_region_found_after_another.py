"""A claim the scan of the regions root finds with its limits file but without its region fails closed on its
GPU, whatever claim the scan found before it (binding.c, add_claim: `have_r`, whether the region file
exists, decides whether the claim is compared with the claims already mapped by its region's inode). Only
a claim whose region exists can be one already mapped by it; one whose region is missing is new, and its
GPU refuses every allocation (the plugin's claim without its accounting: per-process accounting would let
each process take the whole quota).

Claim `a` is complete and limits GPU 1; claim `b`, scanned after it, limits GPU 0 and has no region. The
process has no claim of its own (CARVE_REGION empty) and allocates on GPU 0."""

from __future__ import annotations

import json
from pathlib import Path

from limiter_harness import Claim, require_native, write_claim

from driver.limits import ClaimLimits, DeviceLimit

MIB = 1 << 20
CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_claim_without_its_region_scanned_after_a_complete_one_fails_closed(tmp_path: Path) -> None:
    require_native()
    root = tmp_path / "carve"
    base = Claim(tmp=tmp_path, gpus="2xT4", state=tmp_path / "fake.state")
    uuids = json.loads(base.run("uuids", CUDA_VISIBLE_DEVICES="0,1").stdout)
    for uid, gpu in (("a", 1), ("b", 0)):
        region = root / uid / "region"
        region.parent.mkdir(parents=True)
        write_claim(region, ClaimLimits((DeviceLimit(64 * MIB, 0, uuid=uuids[gpu]),), str(region)))
    (root / "b" / "region").unlink()  # claim b's limits file stays
    env = {"CARVE_REGION": "", "CARVE_REGION_DIR": str(root), "CUDA_VISIBLE_DEVICES": "0,1"}
    out = base.run("alloc", str(MIB), check=False, **env)
    assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), out.stderr  # GPU 0 is claim b's, closed
    assert "is unusable: allocations on this claim's GPUs are refused" in out.stderr, out.stderr
