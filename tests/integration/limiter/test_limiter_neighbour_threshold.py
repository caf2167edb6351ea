"""Another process on the GPU counts as a busy neighbour from 5% of SM time on (feedback.c, NEIGHBOUR_MIN):
under the default core policy the claim is throttled to its share only next to a busy neighbour, and the
target the limiter writes for the plugin (the region's `target`) says which it is: the share, or 100 for
no throttling. NVML's samples are fixed here (CARVE_FAKE_UTIL_FILE): the claim's process at 40%, pid 1 (no
process of the claim) at 5% or at 4%."""

from __future__ import annotations

from pathlib import Path

import pytest

KERNEL_NS = 1_000_000


def targets_written(claim, tmp_path: Path, other: int) -> set[int]:
    """The targets the limiter wrote for the plugin while a client ran next to pid 1 at `other` percent."""
    c = claim(f"other-{other}").create(cores=50)
    rows = ["0 {pid} 40", f"0 1 {other}"]
    samples = tmp_path / f"samples-{other}"
    client = c.popen_sampled(samples, rows, "launch", "2", "64", str(KERNEL_NS), CARVE_TICK_MS="20")
    seen = c.region_values_while(client, lambda r: r._struct.devices[0].target)
    assert client.returncode == 0
    return seen


@pytest.mark.parametrize(("other", "target"), [(5, 50), (4, 100)])
def test_a_neighbour_is_busy_from_five_percent(claim, tmp_path: Path, other: int, target: int) -> None:
    seen = targets_written(claim, tmp_path, other)
    # 0 until the first tick; every tick reads the same list
    assert target in seen and seen <= {0, target}, seen
