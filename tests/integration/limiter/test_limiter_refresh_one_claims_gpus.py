"""A rewrite of one claim's limits file changes the quota of that claim's GPUs only. In a container with two
claims (claim-a on GPU 0, claim-b on GPU 1, each its own region and limits file), the plugin shrinking
claim-a's quota must leave claim-b's GPU at claim-b's: applied to every GPU of the process, a rewrite would
give claim-b's GPU the quota of claim-a's device of the same index (limits.c, apply).

The client runs with CUDA_VISIBLE_DEVICES=1,0, so its device 0, where it allocates and launches, is claim-b's
GPU; it waits for a tick of the feedback thread after each rewrite (no timing asserted; as
test_limiter_limits_refresh.py)."""

from __future__ import annotations

import json

from limiter_harness import Claim, Relimit, limits_path_for, require_native, write_claim

from driver.limits import ClaimLimits, DeviceLimit, write_limits

MIB = 1 << 20


def test_rewriting_one_claims_limits_leaves_the_other_claims_gpu_alone(tmp_path):
    require_native()
    root = tmp_path / "carve"
    base = Claim(tmp=tmp_path, gpus="2xT4", state=tmp_path / "fake.state")
    uuids = json.loads(base.run("uuids", CUDA_VISIBLE_DEVICES="0,1").stdout)
    regions, limits = {}, {}
    for uid, gpu, memory in (("claim-a", 0, 64 * MIB), ("claim-b", 1, 32 * MIB)):
        regions[uid] = root / uid / "region"
        regions[uid].parent.mkdir(parents=True)
        limits[uid] = ClaimLimits(
            devices=(DeviceLimit(memory, 50, uuid=uuids[gpu]),),
            region_path=str(regions[uid]),
            core_policy="force",
        )
        write_claim(regions[uid], limits[uid])
    base.extra = {
        "CARVE_REGION": str(regions["claim-b"]),
        "CARVE_REGION_DIR": str(root),
        "CUDA_VISIBLE_DEVICES": "1,0",
    }
    with Relimit(base, 20 * MIB) as client:
        assert client.first == {"rc": 0}  # 20 MiB of claim-b's 32
        a = limits["claim-a"]
        write_limits(
            limits_path_for(regions["claim-a"]),
            ClaimLimits((DeviceLimit(16 * MIB, 50, uuid=uuids[0]),), a.region_path, core_policy="force"),
        )
        assert client.after_rewrite() == {"rc": 0, "total": 32 * MIB}  # claim-b's GPU: claim-b's quota still
        rc, err = client.close()
        assert rc == 0, err
