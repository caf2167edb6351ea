"""While NVML measures a throttled claim over its target, the limiter keeps cutting its launch budget
(feedback.c, control: the correction applies when target / measured < 1), down to its floor of one launch a
second; it never leaves the budget it calibrated when throttling began.

The fake NVML here measures the claim's process at 100% at every tick (CARVE_FAKE_UTIL_FILE) against a
target of 50 (core policy force). Without the cut the budget stays where the first tick calibrated it,
about half of what the client launched unthrottled: the fake GPU would be half busy with its kernels, as a
claim at its share is. With it, the client launches a few kernels and then one a second: of a 3 s run of 20 ms
kernels the GPU is busy a few percent.
"""

from __future__ import annotations

import json
from pathlib import Path

KERNEL_NS = 20_000_000


def test_a_claim_measured_over_its_target_has_its_budget_cut(claim, tmp_path: Path) -> None:
    c = claim().create(cores=50, core_policy="force")
    client = c.popen_sampled(
        tmp_path / "samples", ["0 {pid} 100"], "launch", "3", "40", str(KERNEL_NS), CARVE_TICK_MS="20"
    )
    out, _ = client.communicate(timeout=60)
    assert client.returncode == 0
    # 40 blocks: one wave on the T4's 40 SMs, so a kernel occupies the GPU for its 20 ms
    overall = json.loads(out.strip().splitlines()[-1])["overall"]
    assert overall < 25, out
