"""When the driver cannot confirm that the address it gave an application is the function of the limiter's
hook version (intercept.c, swap_in_hook: both check queries, cuGetProcAddress and cuGetProcAddress_v2 at the
hook's own version, fail), the application keeps the driver's answer, untouched, and the limiter says so.
What a failed query left in its output is undefined and must not be read as the driver's answer: a driver
may leave the very address it gave the application there, and taking it would forward the application's
calls through a hook whose arguments the driver never confirmed.

The refusing driver fails cuGetProcAddress (REFUSING_CUDA_PROCADDR_V1) and fails cuGetProcAddress_v2 below
CUDA 12.0 after the fake has written its answer (REFUSING_CUDA_PROCADDR_V2_BELOW): the application's query
at 12.0 succeeds, the limiter's at cuMemAlloc's hook version (3.2) fails with the same address left
behind. The fake answers with internal addresses (CARVE_FAKE_PROCADDR_THUNKS), as a real driver does."""

from __future__ import annotations

import json
import subprocess
import sys

from limiter_harness import BUILD, FAKES, PROCADDR_ALLOC_CLIENT

MIB = 1 << 20
REFUSING = BUILD / "refusing"
CUDA_ERROR_NOT_SUPPORTED = 801


def test_an_address_the_driver_could_not_confirm_is_handed_out_untouched(claim) -> None:
    c = claim().create(memory=32 * MIB)
    env = c.env(
        LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}",
        REFUSING_CUDA_PROCADDR_V1=str(CUDA_ERROR_NOT_SUPPORTED),
        REFUSING_CUDA_PROCADDR_V2_BELOW="12000",
        CARVE_FAKE_PROCADDR_THUNKS="1",
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROCADDR_ALLOC_CLIENT], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the driver's own cuMemAlloc: 64 MiB placed whatever the quota (the hook would refuse it), and logged
    assert out == {"resolve": 0, "over": 0}, (out, proc.stderr)
    assert "cuGetProcAddress(cuMemAlloc, 12000): the driver has a newer variant" in proc.stderr, proc.stderr
