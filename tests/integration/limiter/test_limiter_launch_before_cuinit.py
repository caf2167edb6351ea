"""A launch made before cuInit does not leave the process's compute limit off (feedback.c, carve_gate_decide).

At a process's first launch the limiter decides whether to start its feedback thread, from the claims its
GPUs are bound to; before cuInit the driver cannot count its devices, nothing is bound, and the limiter
leaves the decision to a later launch. Had it decided then, on no bindings, the claim's cores limit would
never be enforced in that process: a tenant escapes it with one launch before cuInit, which the driver
refuses anyway. As test_limiter_call_before_cuinit.py for an allocation and the quota."""

from __future__ import annotations

import subprocess
import sys

CUDA_ERROR_NOT_INITIALIZED = 3

SCRIPT = """
import ctypes, os
cuda = ctypes.CDLL("libcuda.so.1")
early = cuda.cuLaunchKernel(None, 1, 1, 1, 32, 1, 1, 0, None, None, None)  # before cuInit
ctx, dev = ctypes.c_void_p(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
cuda.carveFakeKernel.restype = ctypes.c_void_p
f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1)))
before = len(os.listdir("/proc/self/task"))
assert cuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0
print(early, len(os.listdir("/proc/self/task")) - before)
"""


def test_a_launch_before_cuinit_leaves_the_compute_limit_to_be_started(claim):
    c = claim().create(cores=50, core_policy="force")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    early, started = (int(v) for v in proc.stdout.split())
    assert early == CUDA_ERROR_NOT_INITIALIZED, proc.stdout  # the driver's own answer, passed through
    assert started == 1, (
        proc.stdout + proc.stderr
    )  # the first launch after cuInit started the feedback thread
