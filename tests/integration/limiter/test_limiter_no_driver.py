"""A process under the limiter on a machine without the GPU driver's libraries (no libcuda.so.1, no
libnvidia-ml.so.1): each intercepted call answers the driver's "not there" error, the limiter's own refusal
still comes first, and the absence is logged once, never a crash (intercept.c's stand-ins for what the
driver does not export)."""

from __future__ import annotations

import ctypes.util
import json
import re
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import LIMITER

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND = 2, 801, 13

SCRIPT = textwrap.dedent(
    """
    import ctypes, json
    hooks = ctypes.CDLL(None)  # the preloaded limiter's entry points, as a dlopen-based runtime finds them
    p, free, total = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_size_t()
    memory = (ctypes.c_ulonglong * 3)()
    print(json.dumps({
        "alloc": hooks.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)),
        "over": hooks.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(9 << 20)),
        "info": hooks.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)),
        "launch": hooks.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, None, None),
        "nvml": hooks.nvmlDeviceGetMemoryInfo(None, memory),
    }))
    """
)


def test_without_the_driver_calls_fail_with_its_not_there_errors_and_the_quota_still_refuses(tmp_path):
    if ctypes.util.find_library("cuda") or ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has the GPU driver's libraries installed: the case needs a machine without")
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_PRELOAD": str(LIMITER),
        "CARVE_MEMORY_LIMIT": str(8 * MIB),
        "CARVE_REGION_DIR": str(tmp_path / "none"),
    }
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "alloc": CUDA_ERROR_NOT_SUPPORTED,
        "over": CUDA_ERROR_OUT_OF_MEMORY,  # the limiter's own refusal, before the driver is asked
        "info": CUDA_ERROR_NOT_SUPPORTED,
        "launch": CUDA_ERROR_NOT_SUPPORTED,
        "nvml": NVML_ERROR_FUNCTION_NOT_FOUND,
    }
    log = proc.stderr
    assert re.search(
        r"^carve-limiter\[\d+\] error: libcuda\.so\.1 not found \(.*\): CUDA calls fail with NOT_SUPPORTED$",
        log,
        re.M,
    ), log
    assert re.search(
        r"^carve-limiter\[\d+\] warn: libnvidia-ml\.so\.1 not found: no NVML reports, no compute feedback$",
        log,
        re.M,
    ), log
