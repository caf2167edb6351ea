"""CARVE_FAKE_UTIL_FILE: the fake NVML's per-process utilization as a fixed list, for tests of how a caller
reads what a real driver may return (several samples of one pid, pids in any order), which the modelled
samples (one per pid) never do."""

from __future__ import annotations

from pathlib import Path


def test_a_fixed_sample_list_is_returned_in_its_order(fake_run, tmp_path: Path) -> None:
    samples = tmp_path / "samples"
    # two samples of pid 7 around pid 3's, then a line of another GPU, which GPU 0 does not return
    samples.write_text("0 7 60\n0 3 30\n0 7 20\n1 9 50\n")
    result = fake_run(
        """
        N.nvmlInit()
        handles = [N.nvmlDeviceGetHandleByIndex(i) for i in (0, 1)]
        lists = [[(s.pid, s.smUtil) for s in N.nvmlDeviceGetProcessUtilization(h, 0)] for h in handles]
        out(dict(gpu0=lists[0], gpu1=lists[1]))
        """,
        gpus="2xT4",
        CARVE_FAKE_UTIL_FILE=str(samples),
    )
    assert result["gpu0"] == [[7, 60], [3, 30], [7, 20]]
    assert result["gpu1"] == [[9, 50]]
