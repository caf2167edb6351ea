"""A CUDA driver-API client with no framework (ctypes over libcuda.so.1), run in a subprocess by GPU tests.

It needs nothing but the driver, so the GPU limiter tests run on any GPU node; PyTorch is an extra case, not
a prerequisite. The memory mode also runs against the fake libcuda in tests/integration, which keeps this
harness honest on machines without a GPU.

    python cuda_probe.py memory OK_BYTES OVER_BYTES   -> {"free", "total", "ok_rc", "over_rc"}
    python cuda_probe.py spin SECONDS                 -> {"rate": kernel launches completed per second}

Prints one JSON line; exits non-zero with the CUDA error name when setup fails.
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

# A kernel that spins on the SM clock for `cycles` cycles: every block keeps its SM busy for a fixed time, so
# launches per second measure the share of the GPU the process gets. PTX is JIT-compiled by the driver for the
# GPU it runs on (sm_70 is the oldest target the limiter's GPUs need).
SPIN_PTX = b"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry spin(.param .u64 cycles)
{
    .reg .pred %p;
    .reg .u64 %rd<5>;
    ld.param.u64 %rd1, [cycles];
    mov.u64 %rd2, %clock64;
LOOP:
    mov.u64 %rd3, %clock64;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra LOOP;
    ret;
}
\x00"""

CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13  # kHz


class CudaError(RuntimeError):
    pass


def open_driver() -> ctypes.CDLL:
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    return cuda


def check(cuda: ctypes.CDLL, rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        raise CudaError(f"{what}: {name.value.decode() if name.value else rc}")


def context(cuda: ctypes.CDLL) -> ctypes.c_int:
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda, cuda.cuInit(0), "cuInit")
    check(cuda, cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda, cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda, cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return dev


def memory(ok_bytes: int, over_bytes: int) -> dict:
    """What the process sees of its quota, and whether an allocation under it and then one past it succeed."""
    cuda = open_driver()
    context(cuda)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cuda, cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
    first, second = ctypes.c_uint64(), ctypes.c_uint64()
    ok_rc = cuda.cuMemAlloc_v2(ctypes.byref(first), ok_bytes)
    over_rc = cuda.cuMemAlloc_v2(ctypes.byref(second), over_bytes)
    return {"free": free.value, "total": total.value, "ok_rc": ok_rc, "over_rc": over_rc}


def spin(seconds: float) -> dict:
    """Launches one block per SM spinning ~2 ms each, back to back, and counts the launches that complete."""
    cuda = open_driver()
    dev = context(cuda)
    sms, khz = ctypes.c_int(), ctypes.c_int()
    sm_count = CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    check(cuda, cuda.cuDeviceGetAttribute(ctypes.byref(sms), sm_count, dev), "SMs")
    check(cuda, cuda.cuDeviceGetAttribute(ctypes.byref(khz), CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev), "clock")
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda, cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(SPIN_PTX)), "cuModuleLoadData")
    check(cuda, cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"), "cuModuleGetFunction")
    cycles = ctypes.c_uint64(khz.value * 2)  # about 2 ms at the SM clock
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(cycles), ctypes.c_void_p))

    def launch() -> None:
        check(
            cuda,
            cuda.cuLaunchKernel(function, sms.value, 1, 1, 1, 1, 1, 0, None, params, None),
            "cuLaunchKernel",
        )

    for _ in range(10):  # warm-up: JIT, clocks
        launch()
    check(cuda, cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    start, launches = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        launch()
        launches += 1
        if launches % 16 == 0:
            check(cuda, cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    check(cuda, cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    return {"rate": launches / (time.monotonic() - start)}


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["memory"] and len(argv) == 3:
            result = memory(int(argv[1]), int(argv[2]))
        elif argv[:1] == ["spin"] and len(argv) == 2:
            result = spin(float(argv[1]))
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except CudaError as err:
        print(f"cuda_probe: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
