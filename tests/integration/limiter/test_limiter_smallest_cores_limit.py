"""The smallest compute limit, 1%, set by the environment alone (no plugin, no limits file), is enforced: the
limiter starts its feedback thread and its gate counts every launch.

The feedback thread is started at the first launch only when some device can be limited: a claim's limits
file (which the plugin may tighten later), a low priority, or a cores limit above 0 (native/src/feedback.c,
carve_gate_decide). Without a limits file the environment's limit is all there is, and a limit of 1% (a
share no larger than one SM in a hundred) must count as one, not as no limit. What the gate counted is the
limiter's carveLimiterLaunchedBlocks; with no compute limit it stays 0 (test_limiter_grid.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import GRAPH_CLIENT

LAUNCHES = 10
BLOCKS = 8

SCRIPT = GRAPH_CLIENT + textwrap.dedent(
    f"""
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    for _ in range({LAUNCHES}):
        assert cuda.cuLaunchKernel(f, {BLOCKS}, 1, 1, 32, 1, 1, 0, None, None, None) == 0
    print(settled_blocks())
    """
)


def test_a_one_percent_cores_limit_from_the_environment_counts_every_launch(claim):
    c = claim()  # no region, no limits file: the environment's limits, as without the plugin
    env = c.env(CARVE_CORES_LIMIT="1", CARVE_TICK_MS="10")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == LAUNCHES * BLOCKS, proc.stderr
