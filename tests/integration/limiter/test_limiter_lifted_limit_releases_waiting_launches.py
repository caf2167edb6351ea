"""Launches waiting for launch budget go as soon as the claim stops being throttled (feedback.c, control: the
gate's mode leaves THROTTLE; throttle.c, carve_gate_wait: a waiter goes when the mode is no longer
THROTTLE, whatever budget it still lacks). Once throttling stops, nothing refills the budget, so a waiter
that looked only at the budget would wait until the claim is throttled again: for good, when its limit was
lifted.

Without NVML (a libnvidia-ml.so.1 that exports none of it) a forced limit throttles at the default budget of
1000 blocks a second, never corrected: one launch of a million blocks waits about 1000 s for it. The plugin
then lifts the claim's share (its limits file gives 100%)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from limiter_harness import CUDA_CONTEXT, without_nvml

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    """
    import sys, time
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1)))
    assert cuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0  # starts the feedback thread
    time.sleep(0.5)  # ticks of 20 ms switch throttling on: 1000 blocks a second
    print("launching", flush=True)
    assert cuda.cuLaunchKernel(f, 1000, 1000, 1, 32, 1, 1, 0, None, None, None) == 0
    print("launched", flush=True)
    """
)


def test_launches_waiting_for_budget_go_when_the_limit_is_lifted(claim, tmp_path: Path) -> None:
    c = claim().create(cores=50, core_policy="force")
    env = c.env(LD_LIBRARY_PATH=without_nvml(tmp_path), CARVE_TICK_MS="20")
    client = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "launching"
        time.sleep(0.3)  # the million blocks are waiting (about 1000 s of budget)
        c.rewrite_limits(shares=(100,))  # the plugin lifts the claim's share
        # the next tick reads it and the launch goes: held for good, the timeout is the failure
        out, err = client.communicate(timeout=30)
    finally:
        client.kill()
    assert client.returncode == 0, err
    assert out.split() == ["launched"], out
    assert "NVML is unavailable" in err, err
