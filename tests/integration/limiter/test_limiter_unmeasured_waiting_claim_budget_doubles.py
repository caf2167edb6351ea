"""While a throttled claim's launches wait for budget and NVML measures the claim at nothing, the limiter
doubles its launch budget at each tick (feedback.c, control: `rate *= 2`, "launches waited yet nothing
ran: the budget is far too small"). A budget calibrated on a claim that had barely launched is a few
blocks a second; without the doubling, work that waits for it would wait for good.

The fake NVML's samples are a fixed list naming only pid 1, idle (CARVE_FAKE_UTIL_FILE): every tick is a
fresh measurement of the claim at 0%. The claim's limit is forced, so throttling starts at the first tick
after one launch of one block, with a budget of about 25 blocks a second (what it launched, at the target
of 50%). The client then launches 200 kernels of 100 blocks: 800 s at that budget. Doubled at each tick
in which a launch waited (the waiter marks the gate starved when it starts waiting), the budget soon
outgrows the launches: about 4 s here, the first launch waiting 2 s of them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from limiter_harness import CUDA_CONTEXT

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    """
    import time
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1)))
    assert cuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0  # starts the feedback thread
    time.sleep(0.5)  # ticks of 20 ms switch throttling on
    for _ in range(200):
        assert cuda.cuLaunchKernel(f, 100, 1, 1, 32, 1, 1, 0, None, None, None) == 0
    print("launched", flush=True)
    """
)


def test_waiting_launches_of_a_claim_nvml_measures_at_nothing_double_its_budget(
    claim, tmp_path: Path
) -> None:
    c = claim().create(cores=50, core_policy="force")
    samples = tmp_path / "samples"
    samples.write_text("0 1 0\n")  # NVML sees pid 1 only, idle: never the claim's process
    env = c.env(CARVE_FAKE_UTIL_FILE=str(samples), CARVE_TICK_MS="20")
    # held at the first budget, the launches take about 800 s: the timeout is the failure
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["launched"], out.stdout
