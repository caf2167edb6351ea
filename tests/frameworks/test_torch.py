"""PyTorch 2.15 (CUDA 13 wheel, cudart 13) on a 4 GiB slice, with each of its allocators."""

from __future__ import annotations

import pytest
from support.frameworks import QUOTA, T4_MEMORY, T4_SMS

CHUNK_MIB = 256
ALLOCATORS = {
    "caching": ("", "native"),
    "expandable_segments": ("expandable_segments:True", "native"),
    "cudaMallocAsync": ("backend:cudaMallocAsync", "cudaMallocAsync"),
}


@pytest.mark.parametrize("limited", [False, True], ids=["alone", "limited"])
def test_torch_sees_the_device_and_the_quota_as_its_total(tenant, limited):
    out = tenant(limiter=limited).run("torch", "info")
    total = QUOTA if limited else T4_MEMORY
    assert out["available"] and out["count"] == 1, out
    assert out["sms"] == T4_SMS and out["cc"] == "7.5" and out["cuda"].startswith("13."), out
    assert out["total_memory"] == total, out
    assert out["mem_get_info"][1] == total and 0 < out["mem_get_info"][0] <= total, out


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_torch_allocation_over_the_quota_raises_out_of_memory_error(tenant, allocator):
    conf, backend = ALLOCATORS[allocator]
    out = tenant().run("torch", "fill", str(CHUNK_MIB), PYTORCH_CUDA_ALLOC_CONF=conf)
    assert out["backend"] == backend, out
    assert out["under_quota_ok"], out  # half the quota in one tensor works
    assert out["error"] == "OutOfMemoryError", out  # torch.cuda.OutOfMemoryError: not a crash, not a hang
    assert QUOTA - 2 * out["chunk"] < out["allocated"] <= QUOTA, out
    assert 0 < out["max_reserved"] <= QUOTA, out  # memory_reserved() never above the quota
    assert out["free_after"] >= out["free_start"] - (32 << 20), out  # empty_cache gave the quota back
