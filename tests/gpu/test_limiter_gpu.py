"""The limiter on a real GPU (skipped without one by tests/gpu/conftest.py): PyTorch under a 4 GiB quota and
a 30% compute share. Each case runs in a subprocess with libcarve-limiter.so preloaded, as in a container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from driver.limits import ClaimLimits, DeviceLimit, create_region, limits_path_for, write_limits

pytest.importorskip("torch", reason="the GPU limiter tests drive the GPU through PyTorch")

REPO = Path(__file__).resolve().parents[2]
LIMITER = REPO / "native" / "build" / "libcarve-limiter.so"
GIB = 1 << 30


def run_torch(tmp_path: Path, script: str, memory: int = 0, cores: int = 0, **env: str) -> dict:
    if not LIMITER.exists():
        pytest.fail(f"{LIMITER} missing: run `make native`")
    region = tmp_path / f"claim-{memory}-{cores}" / "region"
    region.parent.mkdir(exist_ok=True)
    limits = ClaimLimits(devices=(DeviceLimit(memory, cores),), region_path=str(region), core_policy="force")
    create_region(region, limits)
    write_limits(limits_path_for(region), limits)  # what the limiter enforces, as the plugin writes it
    full = dict(os.environ, LD_PRELOAD=str(LIMITER), CARVE_REGION=str(region), CUDA_VISIBLE_DEVICES="0")
    full.update(env)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=full, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


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
