"""An allocation refused over the memory quota is logged once per process, at its first refusal (the region
counts every refusal; a log line for each would flood a container's log from a retry loop). A forked child
is a process of its own: its first refusal is logged too, whatever its parent had refused before the fork
(region.c, carve_region_after_fork, starts the child's count again)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

from limiter_harness import CUDA_CONTEXT

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY = 2

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    f"""
    import json, os, sys
    p = ctypes.c_uint64()

    def over():
        return cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t({64 * MIB}))

    parent = [over(), over(), over()]
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child = [over(), over()]
        os._exit(0 if child == [{CUDA_ERROR_OUT_OF_MEMORY}] * 2 else 1)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({{"parent": parent, "pid": os.getpid(), "child": pid, "status": status}}))
    """
)


def test_each_process_logs_its_first_refusal_once(claim) -> None:
    c = claim().create(memory=32 * MIB)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["parent"] == [CUDA_ERROR_OUT_OF_MEMORY] * 3, out
    assert out["status"] == 0, (out, proc.stderr)  # the child's two allocations were refused too
    logged = [
        int(m.group(1))
        for line in proc.stderr.splitlines()
        if "first refusal" in line and (m := re.search(r"carve-limiter\[(\d+)\]", line))
    ]
    assert sorted(logged) == sorted([out["pid"], out["child"]]), proc.stderr
