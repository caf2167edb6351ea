"""The limiter on a real GPU (skipped without one by tests/gpu/conftest.py): a 4 GiB quota and a 30% compute
share. Each case runs in a subprocess with libcarve-limiter.so preloaded, as in a container.

The core cases drive the CUDA driver API directly (tests/gpu/cuda_probe.py, ctypes, nothing to install), so
they run on every GPU node; the PyTorch cases are extra (PyTorch's caching allocator, expandable segments)
and are skipped, saying so, where torch is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from driver.limits import ClaimLimits, DeviceLimit, create_region, limits_path_for, write_limits

REPO = Path(__file__).resolve().parents[2]
LIMITER = REPO / "native" / "build" / "libcarve-limiter.so"
GIB = 1 << 30


PROBE = Path(__file__).resolve().parent / "cuda_probe.py"


def needs_torch() -> None:
    pytest.importorskip("torch", reason="this case is about PyTorch's allocator; torch is not installed")


def run_limited(tmp_path: Path, argv: list[str], memory: int = 0, cores: int = 0, **env: str) -> dict:
    """`python argv...` with the limiter preloaded, under a claim of `memory` bytes and `cores` percent."""
    if not LIMITER.exists():
        pytest.fail(f"{LIMITER} missing: run `make native`")
    region = tmp_path / f"claim-{memory}-{cores}" / "region"
    region.parent.mkdir(exist_ok=True)
    limits = ClaimLimits(devices=(DeviceLimit(memory, cores),), region_path=str(region), core_policy="force")
    create_region(region, limits)
    write_limits(limits_path_for(region), limits)  # what the limiter enforces, as the plugin writes it
    full = dict(os.environ, LD_PRELOAD=str(LIMITER), CARVE_REGION=str(region), CUDA_VISIBLE_DEVICES="0")
    full.update(env)
    out = subprocess.run([sys.executable, *argv], env=full, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_torch(tmp_path: Path, script: str, memory: int = 0, cores: int = 0, **env: str) -> dict:
    needs_torch()
    return run_limited(tmp_path, ["-c", textwrap.dedent(script)], memory, cores, **env)


def test_driver_api_sees_the_quota_and_cannot_exceed_it(tmp_path):
    res = run_limited(tmp_path, [str(PROBE), "memory", str(3 * GIB), str(2 * GIB)], memory=4 * GIB)
    assert res["total"] == 4 * GIB and res["free"] <= 4 * GIB
    assert res["ok_rc"] == 0
    assert res["over_rc"] == 2  # CUDA_ERROR_OUT_OF_MEMORY


def test_spin_kernels_run_at_a_30_percent_share(tmp_path):
    full = run_limited(tmp_path, [str(PROBE), "spin", "8"])["rate"]
    shared = run_limited(tmp_path, [str(PROBE), "spin", "8"], cores=30)["rate"]
    ratio = shared / full
    print(f"\nspin kernels (a block per SM, ~2 ms): {full:.1f}/s alone, {shared:.1f}/s at 30% -> {ratio:.2%}")
    assert 0.20 <= ratio <= 0.40


ALLOC = """
    import json, torch
    free, total = torch.cuda.mem_get_info()
    ok = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
    try:
        torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
        refused = False
    except torch.cuda.OutOfMemoryError:
        refused = True
    print(json.dumps({"free": free, "total": total, "refused": refused}))
"""


def test_torch_sees_the_quota_and_cannot_exceed_it(tmp_path):
    res = run_torch(tmp_path, ALLOC, memory=4 * GIB)
    assert res["total"] == 4 * GIB and res["free"] <= 4 * GIB
    assert res["refused"]


def test_expandable_segments_are_held_to_the_quota(tmp_path):
    res = run_torch(tmp_path, ALLOC, memory=4 * GIB, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    assert res["total"] == 4 * GIB and res["refused"]


MATMUL = """
    import json, time, torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    for _ in range(5):
        a @ a
    torch.cuda.synchronize()
    start, n = time.time(), 0
    while time.time() - start < 8:
        a @ a
        n += 1
        if n % 20 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print(json.dumps({"rate": n / (time.time() - start)}))
"""


def test_matmul_throughput_at_a_30_percent_share(tmp_path):
    full = run_torch(tmp_path, MATMUL)["rate"]
    shared = run_torch(tmp_path, MATMUL, cores=30)["rate"]
    ratio = shared / full
    print(f"\nmatmul 8192^2 fp16: {full:.1f}/s unthrottled, {shared:.1f}/s at 30% -> {ratio:.2%}")
    assert 0.20 <= ratio <= 0.40
