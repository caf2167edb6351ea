"""Tests that need a real NVIDIA GPU. Without one they are skipped with the reason, never faked."""

from __future__ import annotations

import ctypes

import pytest


def _real_gpu_present() -> bool:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    # The fake library exports this symbol; a real driver never does.
    if hasattr(lib, "carveFakeVersion"):
        return False
    count = ctypes.c_uint(0)
    return lib.nvmlInit_v2() == 0 and lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value > 0


def pytest_collection_modifyitems(config, items):
    if _real_gpu_present():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine (tests/gpu needs real hardware)")
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(skip)
