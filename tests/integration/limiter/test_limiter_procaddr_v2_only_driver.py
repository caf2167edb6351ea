"""A driver that resolves entry points only through cuGetProcAddress_v2 (its cuGetProcAddress fails) still
has the limiter's hooks handed out (intercept.c, swap_in_hook): when the driver answers with an internal
address, the limiter asks it again at its hook's own version to make sure it is the same function, through
cuGetProcAddress and, when that fails, through cuGetProcAddress_v2. An application that resolves
cuMemAlloc through cuGetProcAddress_v2 (as the CUDA runtime does) must get an allocation the quota
refuses, not the driver's own that nothing limits.

The refusing driver fails cuGetProcAddress (REFUSING_CUDA_PROCADDR_V1) and forwards cuGetProcAddress_v2 to
the fake, which answers with internal addresses (CARVE_FAKE_PROCADDR_THUNKS)."""

from __future__ import annotations

import json
import subprocess
import sys

from limiter_harness import BUILD, FAKES, PROCADDR_ALLOC_CLIENT

MIB = 1 << 20
REFUSING = BUILD / "refusing"
CUDA_ERROR_NOT_SUPPORTED = 801
CUDA_ERROR_OUT_OF_MEMORY = 2


def test_a_driver_without_cugetprocaddress_v1_still_gets_the_hooks(claim) -> None:
    c = claim().create(memory=32 * MIB)
    env = c.env(
        LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}",
        REFUSING_CUDA_PROCADDR_V1=str(CUDA_ERROR_NOT_SUPPORTED),
        CARVE_FAKE_PROCADDR_THUNKS="1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROCADDR_ALLOC_CLIENT], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # 64 MiB against a 32 MiB quota: refused by the limiter's hook
    assert out == {"resolve": 0, "over": CUDA_ERROR_OUT_OF_MEMORY}, (out, proc.stderr)
    assert "newer variant" not in proc.stderr, proc.stderr
