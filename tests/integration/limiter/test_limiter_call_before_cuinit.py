"""A CUDA call made before cuInit does not leave the process unlimited (binding.c, resolve).

The limiter maps each CUDA ordinal to its claim the first time a hook needs it; before cuInit the driver
cannot count its devices (CUDA_ERROR_NOT_INITIALIZED), so the limiter binds nothing then and asks again at
the next call. Had it taken that first answer as final, every device would stay unbound, and unlimited, for
the rest of the process: an application (or a library probing the driver at load) that allocates before
cuInit would escape its quota.
"""

from __future__ import annotations

import subprocess
import sys

MIB = 1 << 20
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_OUT_OF_MEMORY = 2

SCRIPT = f"""
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
p = ctypes.c_uint64()
early = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t({MIB}))  # before cuInit
ctx, dev = ctypes.c_void_p(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
within = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t({4 * MIB}))
over = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t({8 * MIB}))
print(early, within, over)
"""


def test_an_allocation_before_cuinit_leaves_the_quota_enforced_after_it(claim):
    c = claim().create(memory=8 * MIB)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    early, within, over = (int(v) for v in proc.stdout.split())
    assert early == CUDA_ERROR_NOT_INITIALIZED, proc.stdout  # the driver's own answer, passed through
    assert within == 0, proc.stdout + proc.stderr
    # 4 MiB held, 8 MiB more is over the claim's 8 MiB
    assert over == CUDA_ERROR_OUT_OF_MEMORY, proc.stdout + proc.stderr
