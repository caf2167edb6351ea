"""A driver that cannot say how many devices it has (cuDeviceGetCount fails with an error other than "not
initialised"): the limiter binds the claim's limits to CUDA ordinals by position, so the quota still holds;
only "not initialised" (or deinitialised) means "ask again later" (survivors of generated mutants in
native/src/binding.c's resolve)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import BUILD, FAKES, LIMITER

REFUSING = BUILD / "refusing"
MIB = 1 << 20
CUDA_ERROR_UNKNOWN, CUDA_ERROR_INVALID_VALUE = 999, 1

SCRIPT = textwrap.dedent(
    f"""
    import ctypes, json
    cuda = ctypes.CDLL("libcuda.so.1")
    limiter = ctypes.CDLL({str(LIMITER)!r})
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    codes = []
    for size in (16 << 20, 4 << 20):
        p = ctypes.c_uint64()
        codes.append(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)))
    path = ctypes.create_string_buffer(4096)
    index = limiter.carveLimiterDeviceRegion(0, path, len(path))
    print(json.dumps({{"codes": codes, "index": index, "path": path.value.decode()}}))
    """
)


@pytest.mark.parametrize("error", [CUDA_ERROR_UNKNOWN, CUDA_ERROR_INVALID_VALUE])
def test_a_device_count_the_driver_cannot_give_binds_by_position_and_the_quota_holds(claim, error):
    if not (REFUSING / "libcuda.so.1").exists():
        pytest.fail(f"{REFUSING / 'libcuda.so.1'} missing: run `make native`")
    c = claim().create(memory=8 * MIB)
    env = c.env(LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}", REFUSING_CUDA_DEVICE_COUNT=str(error))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["codes"] == [2, 0], res  # 16 MiB over the 8 MiB quota is refused, 4 MiB fits
    assert (res["index"], res["path"]) == (0, str(c.region)), res
