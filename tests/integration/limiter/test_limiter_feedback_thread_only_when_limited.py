"""The limiter starts its feedback thread (NVML sampling, a wake-up every few milliseconds, the limits file
re-read) at a process's first launch only where a compute limit is possible: a device with a cores limit, a
low priority, or a plugin's limits file, which may bring one later. A process under the environment's memory
limit alone runs no thread of the limiter's: an inference server or a notebook that asked for memory only
pays nothing for compute limiting (feedback.c, carve_gate_decide)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from limiter_harness import CUDA_CONTEXT

# pthread_create has returned by the launch's return: a thread it started is listed
SCRIPT = CUDA_CONTEXT + (
    "import os\n"
    "cuda.carveFakeKernel.restype = ctypes.c_void_p\n"
    "f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1)))\n"
    "before = len(os.listdir('/proc/self/task'))\n"
    "assert cuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0\n"
    "print(len(os.listdir('/proc/self/task')) - before)\n"
)


@pytest.mark.parametrize(
    ("env", "threads"),
    [
        ({"CARVE_MEMORY_LIMIT": "64M"}, 0),
        ({"CARVE_MEMORY_LIMIT": "64M", "CARVE_CORES_LIMIT": "50"}, 1),
        ({"CARVE_MEMORY_LIMIT": "64M", "CUDA_TASK_PRIORITY": "1"}, 1),
    ],
    ids=["memory-only", "cores-limit", "low-priority"],
)
def test_the_first_launch_starts_a_thread_only_under_a_compute_limit(claim, env, threads):
    c = claim()  # no region, no limits file: the environment's limits, for this process
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=c.env(CARVE_REGION="", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(threads)], (out.stdout, out.stderr)
