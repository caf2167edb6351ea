"""cuGetProcAddress asked for an entry point by its versioned name ("cuMemAlloc_v2", which the driver resolves
as it resolves the base name) hands out the limiter's hook, not the driver's export: allocations made through
the pointer are charged and refused over the claim's quota like any other. The limiter recognises the
driver's export by its address, whatever name it was asked by; a lookup by base name and version alone finds
no hook named "cuMemAlloc_v2" and would leave the pointer unlimited.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import CUDA_CONTEXT

MIB = 1 << 20

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    """
    import json, sys
    fn = ctypes.c_void_p()
    rc = cuda.cuGetProcAddress(sys.argv[1].encode(), ctypes.byref(fn), 12000, ctypes.c_uint64(0))
    alloc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)(fn.value)
    out = []
    for size in (6 << 20, 6 << 20):  # the second is over the 8 MiB quota
        p = ctypes.c_uint64()
        out.append(alloc(ctypes.byref(p), size))
    print(json.dumps({"rc": rc, "allocs": out}))
    """
)


@pytest.mark.parametrize("name", ["cuMemAlloc_v2", "cuMemAlloc"])
def test_an_entry_point_asked_for_by_its_versioned_name_is_limited(claim, name):
    c = claim(gpus="1xA100-80GB").create(memory=8 * MIB)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, name],
        env=c.env(CARVE_LOG="error"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # CUDA_SUCCESS, then CUDA_ERROR_OUT_OF_MEMORY from the limiter (the driver would place it)
    assert json.loads(proc.stdout) == {"rc": 0, "allocs": [0, 2]}, proc.stderr
