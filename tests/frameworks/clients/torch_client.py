"""A PyTorch job, driven by tests/frameworks and tests/gpu in a subprocess; prints one JSON line.

    torch_client.py info               device count and properties, mem_get_info, the allocator backend
    torch_client.py fill CHUNK_MIB     a tensor of half the quota, then CHUNK_MIB tensors until OOM
    torch_client.py launch SECONDS     a plain launch loop; the SM occupancy it got
    torch_client.py graph SECONDS      a CUDA graph captured once and replayed in a loop; its occupancy
    torch_client.py bench N            time per tensor alloc+free (cached), per launch, per mem_get_info
    torch_client.py init               how long torch's CUDA start-up and the first allocation take
The allocator is chosen by PYTORCH_CUDA_ALLOC_CONF, as a user chooses it. Kernel results are not looked at
(the fake GPUs run no device code); memsets and copies are (the fake backs device memory).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
from occupancy import Occupancy

# Elements of the launch loops' tensor: small on the fake GPUs (short modelled kernels, a fine-grained share);
# tests/gpu asks for more so that a real GPU, not Python, is the bottleneck.
ELEMENTS = int(os.environ.get("CARVE_FW_ELEMENTS", str(1 << 19)))


def info() -> dict:
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    return {
        "available": torch.cuda.is_available(),
        "count": torch.cuda.device_count(),
        "name": props.name,
        "total_memory": props.total_memory,
        "sms": props.multi_processor_count,
        "cc": f"{props.major}.{props.minor}",
        "mem_get_info": [free, total],
        "backend": torch.cuda.get_allocator_backend(),
        "cuda": torch.version.cuda,
    }


def fill(chunk_mib: int) -> dict:
    free0, total = torch.cuda.mem_get_info()
    # Under the quota: one tensor of half of it works, and a memset reaches the host-visible result.
    half = torch.zeros(total // 2, dtype=torch.uint8, device="cuda")
    under_ok = bool(half[-4096:].cpu().eq(0).all())
    del half
    torch.cuda.empty_cache()
    chunk = chunk_mib << 20
    held, max_reserved, error, message = [], 0, "", ""
    try:
        while len(held) * chunk <= 4 * total:  # a limit that never comes ends the loop, not the machine
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
            max_reserved = max(max_reserved, torch.cuda.memory_reserved())
    except torch.cuda.OutOfMemoryError as e:
        error, message = type(e).__name__, str(e).splitlines()[0][:300]
    allocated = len(held) * chunk
    free_full = torch.cuda.mem_get_info()[0]
    del held
    torch.cuda.empty_cache()
    free_after = torch.cuda.mem_get_info()[0]
    # After the OOM the job goes on: the freed quota is usable again.
    again = torch.empty(allocated or chunk, dtype=torch.uint8, device="cuda")
    del again
    return {
        "total": total,
        "free_start": free0,
        "under_quota_ok": under_ok,
        "chunk": chunk,
        "allocated": allocated,
        "max_reserved": max_reserved,
        "error": error,
        "message": message,
        "free_full": free_full,
        "free_after": free_after,
        "backend": torch.cuda.get_allocator_backend(),
    }


def _loop(seconds: float, step) -> dict:
    occ = Occupancy()
    step()  # warm: the first launch loads the module, outside the measured window
    torch.cuda.synchronize()
    since, t0, n = occ.start(), time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        step()
        n += 1
    torch.cuda.synchronize()
    return {"occupancy": occ.percent(since), "steps": n, "seconds": time.monotonic() - t0}


def launch(seconds: float) -> dict:
    x = torch.empty(ELEMENTS, device="cuda")
    return _loop(seconds, lambda: x.add_(1.0))


def graph(seconds: float) -> dict:
    x = torch.empty(ELEMENTS, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the warm-up torch asks for before a capture
        x.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(4):
            x.add_(1.0)
    return dict(_loop(seconds, g.replay), kernels_per_step=4)


def bench(n: int) -> dict:
    x = torch.empty(1024, device="cuda")
    for _ in range(100):
        torch.empty(4096, dtype=torch.uint8, device="cuda")
        x.add_(1.0)
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(n):
        torch.empty(1 << 20, dtype=torch.uint8, device="cuda")  # from the cache after the first
    t1 = time.perf_counter_ns()
    for _ in range(n):
        x.add_(1.0)
    torch.cuda.synchronize()
    t2 = time.perf_counter_ns()
    for _ in range(n):
        torch.cuda.mem_get_info()
    t3 = time.perf_counter_ns()
    return {"tensor_alloc_free": (t1 - t0) / n, "launch": (t2 - t1) / n, "mem_get_info": (t3 - t2) / n}


def init() -> dict:
    t0 = time.perf_counter_ns()
    torch.cuda.init()
    t1 = time.perf_counter_ns()
    torch.empty(1, device="cuda")
    t2 = time.perf_counter_ns()
    return {"runtime_init_ns": t1 - t0, "context_ns": t2 - t1}


def main(argv: list[str]) -> int:
    cmd, args = argv[1], argv[2:]
    commands = {
        "info": lambda: info(),
        "fill": lambda: fill(int(args[0])),
        "launch": lambda: launch(float(args[0])),
        "graph": lambda: graph(float(args[0])),
        "bench": lambda: bench(int(args[0])),
        "init": lambda: init(),
    }
    print(json.dumps(commands[cmd]()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
