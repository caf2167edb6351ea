"""Shared constants of the fake-GPU tests (a module with a unique name: several conftest.py exist)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
NATIVE = REPO / "native"
FAKE_DIR = NATIVE / "build" / "fakes"
FAKE_NVML = FAKE_DIR / "libnvidia-ml.so.1"

# Prepended to every snippet: load the fake by path (as the inventory does) so pynvml binds to it, and
# declare the exported fake_* helpers.
PRELUDE = f"""
import ctypes, json, os, sys, time
import pynvml as N
LIB = ctypes.CDLL({str(FAKE_NVML)!r}, mode=ctypes.RTLD_GLOBAL)
LIB.fake_kernel_submit.restype = ctypes.c_uint64
LIB.fake_kernel_submit.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
LIB.fake_kernel_last_end.restype = ctypes.c_uint64
LIB.fake_kernel_last_end.argtypes = [ctypes.c_uint, ctypes.c_int]
LIB.fake_now_ns.restype = ctypes.c_uint64
LIB.fake_utilization.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_uint64]
LIB.fake_mem_reserve.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_uint64]
LIB.fake_mem_release.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_uint64]
LIB.fake_mem_used.restype = ctypes.c_uint64
def out(obj):
    print(json.dumps(obj))
"""


def load_reference() -> dict[str, Any]:
    """The MIG reference the fake's tables are generated from (committed copy)."""
    with open(NATIVE / "fakes" / "mig-profiles.json", encoding="utf-8") as f:
        return json.load(f)
