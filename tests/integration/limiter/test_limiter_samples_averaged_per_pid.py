"""NVML may return several samples of one process, in any order of pids (feedback.c, measure): the limiter
averages each pid's samples and counts only the claim's pids as the claim's, which the plugin reads back as
the claim's utilization (the region's `utilization`, written at every tick).

The fake NVML here returns a fixed list (CARVE_FAKE_UTIL_FILE): the claim's process twice, at 60% and 20%,
and between them pid 1, a smaller pid that is no process of the claim, at 30%. The claim's utilization is
their average, 40: not their sum (80), nor an average that let pid 1's sample join the claim's (36).
"""

from __future__ import annotations

from pathlib import Path

KERNEL_NS = 1_000_000


def test_a_pids_samples_are_averaged_apart_from_a_smaller_pids(claim, tmp_path: Path) -> None:
    c = claim().create(cores=50)
    rows = ["0 {pid} 60", "0 1 30", "0 {pid} 20"]
    client = c.popen_sampled(
        tmp_path / "samples", rows, "launch", "2", "64", str(KERNEL_NS), CARVE_TICK_MS="20"
    )
    seen = c.region_values_while(client, lambda r: r.utilization(0))
    assert client.returncode == 0
    # 0 until the first tick; every tick reads the same list
    assert 40 in seen and seen <= {0, 40}, seen
