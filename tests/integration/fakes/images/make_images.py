#!/usr/bin/env python3
# ruff: noqa: E501  (SRC is CUDA C kept on its lines)
"""Rebuild the device-code images the fake-libcuda tests load, with the real NVRTC (CUDA 12.9, on the CPU).

    pip install nvidia-cuda-nvrtc-cu12==12.9.86 && python3 tests/integration/fakes/images/make_images.py

Writes kernels.sm_80.cubin, kernels.sm_75.cubin (the same source with `scale` renamed `scale75`) and
kernels.ptx next to this script. They are committed (a few KB) so the tests need no 200 MB compiler;
test_cuda_driver.py checks what they hold (ELF magic, the architecture in e_flags, the names of SRC).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SRC = r"""
extern "C" __global__ void scale(float *x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
__global__ void mangled(int *p) { *p = 1; }
__device__ float table[37];
extern "C" __global__ void use_table(float *o) { o[0] = table[threadIdx.x % 37]; }
"""


def nvrtc() -> ctypes.CDLL:
    import nvidia  # the namespace package of the nvidia-* wheels

    for d in nvidia.__path__:
        for lib in glob.glob(os.path.join(d, "cuda_nvrtc", "lib", "libnvrtc.so.12")):
            return ctypes.CDLL(lib)
    raise SystemExit("make_images: pip install nvidia-cuda-nvrtc-cu12 first")


def compile_(nv: ctypes.CDLL, src: str, arch: str, cubin: bool) -> bytes:
    prog = ctypes.c_void_p()
    if nv.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernels.cu", 0, None, None):
        raise SystemExit("nvrtcCreateProgram failed")
    opts = (ctypes.c_char_p * 1)(f"--gpu-architecture={arch}".encode())
    if nv.nvrtcCompileProgram(prog, 1, opts):
        raise SystemExit("nvrtcCompileProgram failed")
    size = ctypes.c_size_t()
    get_size, get = (nv.nvrtcGetCUBINSize, nv.nvrtcGetCUBIN) if cubin else (nv.nvrtcGetPTXSize, nv.nvrtcGetPTX)
    get_size(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    get(prog, buf)
    return buf.raw


def main() -> None:
    nv = nvrtc()
    (HERE / "kernels.sm_80.cubin").write_bytes(compile_(nv, SRC, "sm_80", True))
    (HERE / "kernels.sm_75.cubin").write_bytes(compile_(nv, SRC.replace("scale", "scale75"), "sm_75", True))
    (HERE / "kernels.ptx").write_bytes(compile_(nv, SRC, "compute_80", False))
    sys.stdout.write("wrote kernels.sm_80.cubin kernels.sm_75.cubin kernels.ptx\n")


if __name__ == "__main__":
    main()
