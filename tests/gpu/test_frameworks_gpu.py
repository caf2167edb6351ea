"""tests/frameworks' cases on a real GPU: cudart 12 and 13, CuPy and PyTorch on a 4 GiB / 30% slice.

Skipped without a GPU (tests/gpu/conftest.py). With one, they need the framework environment
(CARVE_FRAMEWORKS_PYTHON; hack/gpu_check.sh builds it, or installs it from a wheelhouse on a machine without
PyPI: docs/gpu.md) and fail, saying so, without it. The share is measured by NVML's per-process samples.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.frameworks import LIMITER, FrameworksMissing, Tenant, frameworks_python

GIB = 1 << 30
QUOTA = 4 * GIB
CHUNK = 256 << 20
SHARE = 30
TOLERANCE = 2
SLACK = 64 << 20  # a real GPU's free memory moves a little with the driver's own use
RUNTIMES = ["cudart12", "cudart13"]
ALLOCATORS = {
    "caching": "",
    "expandable_segments": "expandable_segments:True",
    "cudaMallocAsync": "backend:cudaMallocAsync",
}


@pytest.fixture(scope="module")
def frameworks() -> Path:
    try:
        python = frameworks_python()
    except FrameworksMissing as e:
        pytest.fail(str(e))
    if not LIMITER.exists():
        pytest.fail(f"{LIMITER} missing: run `make native`")
    return python


@pytest.fixture
def tenant(frameworks, tmp_path: Path):
    def make(name: str = "tenant", limiter: bool = True, **kw) -> Tenant:
        kw.setdefault("memory", QUOTA if limiter else 0)
        gpu0 = {"CUDA_VISIBLE_DEVICES": "0"}
        return Tenant(tmp=tmp_path / name, gpus="", limiter=limiter, extra=gpu0, **kw)

    return make


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_cudart_on_a_gpu_sees_the_quota_as_its_total(tenant, runtime):
    alone = tenant("alone", limiter=False).run(runtime, "info")["devices"][0]
    limited = tenant().run(runtime, "info")["devices"][0]
    assert alone["total"] > QUOTA, alone
    assert limited["total"] == limited["driver_total"] == limited["device_total_mem"] == QUOTA, limited
    assert limited["sms"] == alone["sms"] and limited["cc"] == alone["cc"], (alone, limited)


@pytest.mark.parametrize("command", ["fill", "fill-async", "vmm"])
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_cudart_on_a_gpu_stops_at_the_quota(tenant, runtime, command):
    out = tenant().run(runtime, command, str(CHUNK))
    chunk = out["chunk"]
    if command == "vmm":
        assert out["reserve"] == 0 and out["create"] == 2 and out["map"] == 0, out
        assert abs(out["free_reserved"] - out["free_start"]) <= SLACK, out
    else:
        assert out["error"] == "cudaErrorMemoryAllocation" and out["realloc"] == "cudaSuccess", out
    assert QUOTA - chunk - SLACK < out["allocated"] <= QUOTA, out
    assert abs(out["free_after"] - out["free_start"]) <= SLACK, out


def test_cupy_on_a_gpu_sees_the_quota_and_stops_at_it(tenant):
    info = tenant().run("cupy", "info")
    assert info["total_memory"] == QUOTA and info["mem_get_info"][1] == QUOTA, info
    out = tenant("fill").run("cupy", "fill", str(CHUNK >> 20))
    assert out["under_quota_ok"] and out["error"] == "OutOfMemoryError", out
    assert QUOTA - out["chunk"] - SLACK < out["allocated"] <= QUOTA and out["max_reserved"] <= QUOTA, out


def test_torch_on_a_gpu_sees_the_quota(tenant):
    out = tenant().run("torch", "info")
    assert out["total_memory"] == QUOTA and out["mem_get_info"][1] == QUOTA, out


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_torch_on_a_gpu_raises_out_of_memory_error_at_the_quota(tenant, allocator):
    out = tenant().run("torch", "fill", str(CHUNK >> 20), PYTORCH_CUDA_ALLOC_CONF=ALLOCATORS[allocator])
    assert out["under_quota_ok"] and out["error"] == "OutOfMemoryError", out
    assert QUOTA - 2 * out["chunk"] - SLACK < out["allocated"] <= QUOTA, out
    assert 0 < out["max_reserved"] <= QUOTA, out


@pytest.mark.parametrize("client,command", [("torch", "launch"), ("torch", "graph"), ("cupy", "launch")])
def test_framework_loop_on_a_gpu_holds_a_30_percent_share(tenant, client, command):
    # Large tensors: the GPU, not Python, is the bottleneck of the loop.
    out = tenant(cores=SHARE).run(client, command, "6", CARVE_FW_ELEMENTS=str(1 << 26))
    assert abs(out["occupancy"] - SHARE) <= TOLERANCE, out
