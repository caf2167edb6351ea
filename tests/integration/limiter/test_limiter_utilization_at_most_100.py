"""The claim's utilization the limiter writes for the plugin is a share of one GPU: at most 100, however
much NVML's samples of the claim's processes add up to (feedback.c, measure: each pid's average, summed
over the claim's pids, then capped). Two processes of the claim at 70% each are 140% as a sum: a driver's
samples of overlapping windows, or processes that share the SMs, can add up to more than the GPU."""

from __future__ import annotations

from pathlib import Path

KERNEL_NS = 1_000_000
MIB = 1 << 20


def test_the_claims_utilization_is_capped_at_the_whole_gpu(claim, tmp_path: Path) -> None:
    c = claim().create(cores=50)
    other = c.popen("hold", str(MIB))  # a second process of the claim, holding a slot of its own
    try:
        assert other.stdout is not None and other.stdout.readline().startswith("ready")
        rows = ["0 {pid} 70", f"0 {other.pid} 70"]
        client = c.popen_sampled(
            tmp_path / "samples", rows, "launch", "2", "64", str(KERNEL_NS), CARVE_TICK_MS="20"
        )
        seen = c.region_values_while(client, lambda r: r.utilization(0))
    finally:
        other.kill()
        other.communicate(timeout=60)
    assert client.returncode == 0
    # 0 until the first tick; every tick reads the same list
    assert 100 in seen and seen <= {0, 100}, seen
