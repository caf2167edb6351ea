"""A CuPy job (cudart 12), driven by tests/frameworks and tests/gpu in a subprocess; prints one JSON line.

cupy_client.py info             device count and properties, memGetInfo
cupy_client.py fill CHUNK_MIB   an array of half the quota, then CHUNK_MIB arrays until OOM
cupy_client.py launch SECONDS   an elementwise kernel in a loop (NVRTC-compiled, cuModuleLoadData)
"""

from __future__ import annotations

import json
import os
import sys
import time

import cupy
from occupancy import Occupancy

# Elements of the launch loops' tensor: small on the fake GPUs (short modelled kernels, a fine-grained share);
# tests/gpu asks for more so that a real GPU, not Python, is the bottleneck.
ELEMENTS = int(os.environ.get("CARVE_FW_ELEMENTS", str(1 << 19)))


def info() -> dict:
    rt = cupy.cuda.runtime
    props = rt.getDeviceProperties(0)
    free, total = rt.memGetInfo()
    return {
        "count": rt.getDeviceCount(),
        "name": props["name"].decode(),
        "total_memory": props["totalGlobalMem"],
        "sms": props["multiProcessorCount"],
        "cc": f"{props['major']}.{props['minor']}",
        "mem_get_info": [free, total],
        "runtime": rt.runtimeGetVersion(),
    }


def fill(chunk_mib: int) -> dict:
    pool = cupy.get_default_memory_pool()
    free0, total = cupy.cuda.runtime.memGetInfo()
    half = cupy.zeros(total // 2, dtype=cupy.uint8)
    under_ok = bool((half[-4096:].get() == 0).all())
    del half
    pool.free_all_blocks()
    chunk = chunk_mib << 20
    held, max_pool, error, message = [], 0, "", ""
    try:
        while len(held) * chunk <= 4 * total:
            held.append(cupy.empty(chunk, dtype=cupy.uint8))
            max_pool = max(max_pool, pool.total_bytes())
    except cupy.cuda.memory.OutOfMemoryError as e:
        error, message = type(e).__name__, str(e).splitlines()[0][:300]
    allocated = len(held) * chunk
    free_full = cupy.cuda.runtime.memGetInfo()[0]
    del held
    pool.free_all_blocks()
    free_after = cupy.cuda.runtime.memGetInfo()[0]
    again = cupy.empty(allocated or chunk, dtype=cupy.uint8)
    del again
    return {
        "total": total,
        "free_start": free0,
        "under_quota_ok": under_ok,
        "chunk": chunk,
        "allocated": allocated,
        "max_reserved": max_pool,
        "error": error,
        "message": message,
        "free_full": free_full,
        "free_after": free_after,
    }


def launch(seconds: float) -> dict:
    occ = Occupancy()
    x = cupy.empty(ELEMENTS, dtype=cupy.float32)
    x *= 2  # compiles and loads the kernel outside the window
    cupy.cuda.Device().synchronize()
    since, t0, n = occ.start(), time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        x *= 2
        n += 1
    cupy.cuda.Device().synchronize()
    return {"occupancy": occ.percent(since), "steps": n, "seconds": time.monotonic() - t0}


def main(argv: list[str]) -> int:
    cmd, args = argv[1], argv[2:]
    commands = {"info": info, "fill": lambda: fill(int(args[0])), "launch": lambda: launch(float(args[0]))}
    print(json.dumps(commands[cmd]()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
