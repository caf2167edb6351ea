"""A cuMemGetInfo the driver refuses is passed back untouched (report.c): the limiter writes the claim's
quota into the driver's answer only when the driver has answered. Asked with no pointer for the free or the
total bytes, the driver refuses (CUDA_ERROR_INVALID_VALUE) and writes nothing; the limiter must not write
through the null pointer either (the process would die of SIGSEGV), nor through the other pointer, which
the caller's own value must keep."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import CUDA_CONTEXT

MIB = 1 << 20
CUDA_ERROR_INVALID_VALUE = 1
SENTINEL = 1 << 40  # above any quota: a clamp to the quota would show

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    f"""
    import json
    free, total = ctypes.c_size_t({SENTINEL}), ctypes.c_size_t({SENTINEL})
    rcs = [cuda.cuMemGetInfo_v2(None, ctypes.byref(total)), cuda.cuMemGetInfo_v2(ctypes.byref(free), None)]
    print(json.dumps({{"rc": rcs, "free": free.value, "total": total.value}}))
    """
)


def test_a_memory_report_the_driver_refused_is_not_clamped(claim) -> None:
    c = claim().create(memory=64 * MIB)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"rc": [CUDA_ERROR_INVALID_VALUE] * 2, "free": SENTINEL, "total": SENTINEL}, out
