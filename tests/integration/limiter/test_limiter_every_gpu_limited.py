"""A process whose every GPU has a compute limit (16, the most a claim names) is still gated: launches skip
the limiter's gate only while no device counts or throttles, and a device that does keeps them on it.

native/tests/limiter_refusal_cuda's `graph N` launches a graph the limiter has no record of N times on
ordinal 0 and reports the blocks the limiter counted (one a launch; test_limiter_refusals.py).
"""

from __future__ import annotations

import json

from limiter_harness import BUILD, FAKES, write_claim

from driver.limits import ClaimLimits, DeviceLimit

CLIENT = BUILD / "tests" / "limiter_refusal_cuda"
REFUSING = BUILD / "refusing"
MIB = 1 << 20


def test_launches_are_counted_when_all_sixteen_gpus_have_a_compute_limit(claim):
    c = claim(gpus="16xT4")
    devices = tuple(DeviceLimit(8 * MIB, 50) for _ in range(16))
    write_claim(c.region, ClaimLimits(devices=devices, region_path=str(c.region)))
    out = c.run("graph", "25", program=CLIENT, LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}")
    (step,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert step["rc"] == 0 and step["charged"] >= step["launches"] == 25, step
