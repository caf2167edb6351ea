"""A claim with a forced compute limit in a container without a working NVML (here a libnvidia-ml.so.1
that exports none of NVML, found before any NVML the host has installed): the limiter cannot measure, so it
throttles by an estimate (feedback.c, control: when throttling starts without a measurement, a budget from
what the claim launched, scaled to its target) and never adjusts it. The application runs at that budget;
its launches are never held for good, as they would be with a budget of nothing that no measurement will
ever correct."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from limiter_harness import CUDA_CONTEXT, FAKES

KERNEL_NS = 1_000_000
LAUNCHES = 300

# 300 kernels of one wave each (40 blocks on the T4's 40 SMs): 0.3 s of GPU time, about 0.6 s at a 50% share
SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    f"""
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64({KERNEL_NS})))
    for _ in range({LAUNCHES}):
        assert cuda.cuLaunchKernel(f, 40, 1, 1, 128, 1, 1, 0, None, None, None) == 0
    assert cuda.cuCtxSynchronize() == 0
    print("launched", {LAUNCHES})
    """
)


def test_a_forced_limit_without_nvml_still_lets_launches_through(claim, tmp_path: Path) -> None:
    c = claim().create(cores=50, core_policy="force")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libcuda.so.1").symlink_to(FAKES / "libcuda.so.1")
    # loads, but has no nvmlInit_v2 (it is the fake libcuda): NVML cannot start, whatever the host has
    (lib / "libnvidia-ml.so.1").symlink_to(FAKES / "libcuda.so.1")
    # held for good, the client would never end: the timeout is the failure, far past the run's second
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=c.env(LD_LIBRARY_PATH=str(lib), CARVE_TICK_MS="20"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["launched", str(LAUNCHES)], proc.stdout
    # the limiter did run without NVML
    assert "NVML is unavailable" in proc.stderr, proc.stderr
