"""CuPy 14 (cupy-cuda12x, cudart 12) on a 4 GiB slice: what it sees, where its pool stops, which OOM."""

from __future__ import annotations

import pytest
from support.frameworks import QUOTA, T4_MEMORY, T4_SMS

CHUNK_MIB = 256


@pytest.mark.parametrize("limited", [False, True], ids=["alone", "limited"])
def test_cupy_sees_the_device_and_the_quota_as_its_total(tenant, limited):
    out = tenant(limiter=limited).run("cupy", "info")
    total = QUOTA if limited else T4_MEMORY
    assert out["count"] == 1 and out["sms"] == T4_SMS and out["cc"] == "7.5", out
    assert out["total_memory"] == total, out  # cudaGetDeviceProperties: cuDeviceTotalMem
    assert out["mem_get_info"][1] == total and 0 < out["mem_get_info"][0] <= total, out


def test_cupy_pool_stops_at_the_quota_with_cupys_out_of_memory_error(tenant):
    out = tenant().run("cupy", "fill", str(CHUNK_MIB))
    assert out["under_quota_ok"], out
    assert out["error"] == "OutOfMemoryError", out  # cupy.cuda.memory.OutOfMemoryError, not a crash
    assert QUOTA - out["chunk"] < out["allocated"] <= QUOTA, out
    assert out["max_reserved"] <= QUOTA, out  # the pool never held more than the quota
    assert out["free_after"] == out["free_start"], out
