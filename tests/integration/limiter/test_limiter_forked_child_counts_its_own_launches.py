"""A forked child's launch count starts at nothing (feedback.c, carve_feedback_after_fork: the child's gates
are cleared, as the feedback thread that drained them is not in the child). Left as the parent's, the
child's count (carveLimiterLaunchedBlocks, what the limiter charged a device) would start at what its parent
launched, and its first tick would take the parent's undrained launches, its token bank and its starved mark
for its own: a budget calibrated on launches it never made.

The parent launches 5 kernels of 8 blocks and waits for them to be counted, then forks; the child launches
3 more (the fake driver lets a forked child use CUDA) and reads its own count."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from limiter_harness import GRAPH_CLIENT

SCRIPT = GRAPH_CLIENT + textwrap.dedent(
    """
    import os
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    def launch(n):
        for _ in range(n):
            assert cuda.cuLaunchKernel(f, 8, 1, 1, 32, 1, 1, 0, None, None, None) == 0
        return settled_blocks()
    print("parent", launch(5), flush=True)
    pid = os.fork()
    if pid == 0:
        print("child", launch(3), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    """
)


def test_a_forked_childs_launch_count_is_its_own(claim) -> None:
    c = claim().create(cores=50, core_policy="force")
    env = c.env(CARVE_TICK_MS="10")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["parent 40", "child 24"], proc.stdout
