"""CARVE_TICK_MS sets the feedback tick from 10 to 1,000 ms; any other value leaves the default of 100 ms
(feedback.c, carve_gate_decide).

The ticks are read from the limiter's debug line of each tick, which logs the time since the tick before
(test_limiter_budget_follows_the_feedback_law.py). A tick never comes before its period is up, so a period
shows as a floor under every tick's time after the first, whatever the machine's load; and a period far
under the default shows as ticks that mostly come well before 100 ms.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import CUDA_CONTEXT

ELAPSED = re.compile(r"device 0 tick: launched \d+ in (\S+) s")

# one launch decides the process's gate (a forced limit starts the feedback thread), then the ticks run
CLIENT = CUDA_CONTEXT + textwrap.dedent(
    """
    import sys, time
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    assert cuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0
    time.sleep(float(sys.argv[1]))
    """
)


def tick_times(claim, tick_ms: str | None, seconds: float) -> list[float]:
    """The time since the tick before of every tick after the first, CARVE_TICK_MS=tick_ms (None: unset)."""
    c = claim().create(cores=50, core_policy="force")
    env = c.env(CARVE_LOG="debug", **({} if tick_ms is None else {"CARVE_TICK_MS": tick_ms}))
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, str(seconds)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    times = [float(m[1]) for m in ELAPSED.finditer(proc.stderr)][1:]
    assert len(times) >= 2, proc.stderr[-3000:]
    return times


@pytest.mark.parametrize(("tick_ms", "period"), [("10", 0.010), ("1000", 1.0)])
def test_a_tick_period_in_range_is_taken(claim, tick_ms: str, period: float) -> None:
    times = tick_times(claim, tick_ms, 0.3 if period < 0.1 else 2.2)
    assert min(times) >= period, times
    # far under the default: a loaded machine delays ticks, not every one of them by 90 ms
    if period < 0.1:
        assert statistics.median(times) < 0.05, times


@pytest.mark.parametrize("tick_ms", [None, "9", "1001", "fast", ""])
def test_a_tick_period_out_of_range_leaves_the_default(claim, tick_ms: str | None) -> None:
    times = tick_times(claim, tick_ms, 0.5)
    assert min(times) >= 0.1, times
    assert statistics.median(times) < 0.5, times  # not 1,000 ms either
