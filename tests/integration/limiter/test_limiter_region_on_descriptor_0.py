"""A process that started without descriptor 0 (a daemon closes it) gets the claim's region on it, the first
file the limiter opens when the claim is the environment's (CARVE_REGION and CARVE_MEMORY_LIMIT, no limits
file of the plugin's: the region is created from them). A child it forks closes that descriptor like any
other (region.c, carve_close_if_same, at the fork), so the parent's slot lock, which belongs to that open
file description, goes with the parent: killed while its child runs, its usage comes back to the claim's
next process near the quota, while the child's stays counted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

from limiter_harness import CUDA_CONTEXT

from driver.limits import Region

MIB = 1 << 20

# the parent allocates 6 MiB and forks; the child allocates 1 MiB; both print and wait to be killed
SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    f"""
    import os, sys, time
    p = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t({6 * MIB})) == 0
    held = os.readlink("/proc/self/fd/0")
    if os.fork() == 0:
        assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t({1 * MIB})) == 0
        os.write(1, f"child {{os.getpid()}}\\n".encode())
    else:
        os.write(1, f"parent {{held}}\\n".encode())
    time.sleep(120)
    """
)


def test_a_region_on_descriptor_0_is_closed_in_a_forked_child(claim) -> None:
    c = claim()
    proc = subprocess.Popen(
        ["sh", "-c", 'exec "$0" -c "$1" 0<&-', sys.executable, SCRIPT],
        env=c.env(CARVE_MEMORY_LIMIT=str(8 * MIB)),
        stdout=subprocess.PIPE,
        text=True,
    )
    child = None
    try:
        assert proc.stdout is not None
        lines = dict(proc.stdout.readline().split(" ", 1) for _ in range(2))
        child = int(lines["child"])
        assert lines["parent"].strip() == str(c.region)  # the premise: the region is on descriptor 0
        proc.kill()  # the parent
        proc.wait()
        assert (
            c.run("alloc", str(4 * MIB), CARVE_MEMORY_LIMIT=str(8 * MIB)).stdout.strip() == "0"
        )  # the parent's 6 MiB came back
        with Region.open(c.region) as r:
            assert r.used_bytes(0) == 1 * MIB
            assert [p.pid for p in r.processes() if p.pid > 0] == [child]
    finally:
        proc.kill()
        proc.wait()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
