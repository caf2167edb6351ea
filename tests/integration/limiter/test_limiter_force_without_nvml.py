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

from limiter_harness import CUDA_CONTEXT, python_client, without_nvml

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


# The limits arrive while the process is idle (the plugin gives the claim its share after it started): the
# tick that reads them saw no launch to estimate from, so the budget is the default, 1000 blocks a second.
# 50 launches of 10 blocks: half a second at that budget.
IDLE_FIRST = CUDA_CONTEXT + textwrap.dedent(
    f"""
    import sys, time
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64({KERNEL_NS})))
    assert cuda.cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, None, None, None) == 0  # no limit yet: not counted
    print("ready", flush=True)
    sys.stdin.readline()  # the limits file now gives the claim a share
    time.sleep(0.5)  # ticks of 20 ms read the new limits while nothing launches
    for _ in range(50):
        assert cuda.cuLaunchKernel(f, 10, 1, 1, 128, 1, 1, 0, None, None, None) == 0
    assert cuda.cuCtxSynchronize() == 0
    print("launched", 50)
    """
)


def test_a_forced_limit_without_nvml_still_lets_launches_through(claim, tmp_path: Path) -> None:
    c = claim().create(cores=50, core_policy="force")
    lib = without_nvml(tmp_path)
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


def test_a_limit_that_arrives_while_idle_still_lets_launches_through(claim, tmp_path: Path) -> None:
    c = claim().create(core_policy="force")  # no compute limit yet
    env = c.env(LD_LIBRARY_PATH=without_nvml(tmp_path), CARVE_TICK_MS="20")
    client = python_client(IDLE_FIRST, env)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "ready"
        c.rewrite_limits(shares=(50,))  # the plugin's effective share for the claim's GPU
        # at a budget of one block a second the 500 blocks would take minutes: the timeout is the failure
        out, err = client.communicate("go\n", timeout=60)
    finally:
        client.kill()
    assert client.returncode == 0, err
    assert out.split() == ["launched", "50"], out
    assert "NVML is unavailable" in err, err
