"""tests/gpu's CUDA driver client (cuda_probe.py) against the fake libcuda: the harness the real-GPU tests use
must itself see the quota and be refused past it, so a green GPU run cannot come from a broken probe."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20
PROBE = Path(__file__).resolve().parents[2] / "gpu" / "cuda_probe.py"


def probe(claim, *argv: str, preload: bool = True) -> dict:
    env = claim.env(preload=preload)
    cmd = [sys.executable, str(PROBE), *argv]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_probe_sees_the_quota_and_is_refused_past_it(claim):
    c = claim().create(memory=64 * MIB)
    res = probe(c, "memory", str(40 * MIB), str(32 * MIB))
    assert res["total"] == 64 * MIB and res["free"] <= 64 * MIB
    assert res["ok_rc"] == 0 and res["over_rc"] == 2  # CUDA_ERROR_OUT_OF_MEMORY


def test_probe_without_the_limiter_gets_the_whole_fake_gpu(claim):
    c = claim().create(memory=64 * MIB)
    res = probe(c, "memory", str(40 * MIB), str(32 * MIB), preload=False)
    assert res["total"] > 1024 * MIB and res["ok_rc"] == 0 and res["over_rc"] == 0
