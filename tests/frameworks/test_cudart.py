"""A plain CUDA runtime program (native/tests/cudart_client.c) on cudart 12.9 and 13.2, through the limiter.

The program reaches the driver only as real applications do: cudart resolves every driver function with
cuGetProcAddress, and the VMM calls come from cudaGetDriverEntryPointByVersion (PyTorch's way).
"""

from __future__ import annotations

import pytest
from support.frameworks import QUOTA, T4_MEMORY, T4_SMS

CHUNK = 256 << 20
RUNTIMES = ["cudart12", "cudart13"]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("limited", [False, True], ids=["alone", "limited"])
def test_cudart_sees_the_device_and_the_quota_as_its_total(tenant, runtime, limited):
    out = tenant(limiter=limited).run(runtime, "info")
    assert out["count"] == 1, out
    assert out["runtime"] // 1000 == int(runtime[6:]), out
    dev = out["devices"][0]
    assert dev["sms"] == T4_SMS and dev["cc"] == "7.5", dev
    total = QUOTA if limited else T4_MEMORY
    # every path a runtime program has to the figure: cudaMemGetInfo, cuMemGetInfo and cuDeviceTotalMem
    # resolved through the runtime
    assert dev["total"] == dev["driver_total"] == dev["device_total_mem"] == total, dev
    assert 0 < dev["free"] <= total, dev


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_cudart_malloc_fills_the_quota_then_fails_with_out_of_memory(tenant, runtime):
    out = tenant().run(runtime, "fill", str(CHUNK))
    assert out["error"] == "cudaErrorMemoryAllocation", out
    assert QUOTA - CHUNK < out["allocated"] <= QUOTA, out
    assert out["free_full"] < CHUNK, out  # at the quota, the report says so
    assert out["free_after"] == out["free_start"], out  # every free released what its allocation charged
    assert out["realloc"] == "cudaSuccess", out


def test_cudart_without_the_limiter_fills_the_whole_gpu(tenant):
    out = tenant(limiter=False).run("cudart12", "fill", str(CHUNK))
    assert out["error"] == "cudaErrorMemoryAllocation", out
    assert out["allocated"] > T4_MEMORY - 2 * CHUNK, out  # the quota above is the limiter's, not the fake's


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_cudart_malloc_async_pool_holds_the_quota_and_gives_it_back(tenant, runtime):
    out = tenant().run(runtime, "fill-async", str(CHUNK))
    assert out["error"] == "cudaErrorMemoryAllocation", out
    assert QUOTA - CHUNK < out["allocated"] <= QUOTA, out
    assert out["trim"] == "cudaSuccess", out
    assert out["free_after"] == out["free_start"], out  # freed and trimmed: the quota is whole again
    assert out["realloc"] == "cudaSuccess", out


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_cudart_vmm_charges_cumemcreate_not_the_address_reservation(tenant, runtime):
    out = tenant().run(runtime, "vmm", str(CHUNK))
    assert out["reserve"] == 0 and out["reserved"] >= 4 * QUOTA - out["granularity"], out  # 4x the quota
    assert out["free_reserved"] == out["free_start"], out  # a reservation holds no memory
    assert out["create"] == 2, out  # CUDA_ERROR_OUT_OF_MEMORY
    assert out["map"] == 0, out
    assert QUOTA - out["chunk"] < out["allocated"] <= QUOTA, out
    assert out["free_full"] < out["chunk"], out
    assert out["free_after"] == out["free_start"], out  # cuMemRelease released what cuMemCreate charged
