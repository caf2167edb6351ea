"""How long building and validating a node's ResourceSlices takes, per strategy.

Prints figures and asserts nothing about speed; it checks that each timed build made the devices the
strategy promises (the counts below come from the strategies' definitions and NVIDIA's A100/H100 MIG
placement tables: 7x 1g.10gb, 7x 1g.10gb+me, 4x 1g.20gb, 3x 2g.20gb, 2x 3g.40gb, 1x 4g.40gb, 1x 7g.80gb).

Baseline: 16 GPUs, all `exclusive`. The plugin rebuilds slices on every inventory or strategy change and
the simulator builds them for every simulated node, so the cost per node matters at cluster scale.
"""

from __future__ import annotations

import time

from driver.devices import Settings, build_slices, limits_for, validate_slices
from driver.devices.catalog import fake_node

GPUS = fake_node("8xA100-80GB,8xH100-80GB", "bench-node")
MIG_PLACEMENTS_PER_GPU = 7 + 7 + 4 + 3 + 2 + 1 + 1
# device types each strategy publishes for the 16 GPUs (mig: every placement plus the whole GPU)
EXPECTED_TYPES = {
    "exclusive": {"gpu": 16},
    "soft": {"vgpu": 16},
    "slots": {"slot": 16 * 100},
    "mig": {"gpu": 16, "mig": 16 * MIG_PLACEMENTS_PER_GPU},
}


def device_types(slices: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in slices:
        for d in s["spec"].get("devices", []):
            kind = d["attributes"]["type"]["string"]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def per_call(fn, budget_s: float = 1.0) -> float:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget_s:
        fn()
        n += 1
    return (time.perf_counter() - start) / n


def test_devices_slice_building_cost_per_strategy():
    rows = []
    exclusive = dict.fromkeys(range(16), "exclusive")
    for version in ("1.34", "1.36"):
        base = per_call(lambda v=version: build_slices("n", GPUS, exclusive, None, v))
        base_slices = build_slices("n", GPUS, exclusive, None, version)
        assert device_types(base_slices) == EXPECTED_TYPES["exclusive"]
        for strategy, settings in (("soft", None), ("slots", Settings(split_count=100)), ("mig", None)):
            strategies = dict.fromkeys(range(16), strategy)
            t = per_call(lambda s=strategies, c=settings, v=version: build_slices("n", GPUS, s, c, v))
            slices = build_slices("n", GPUS, strategies, settings, version)
            devices = sum(len(s["spec"].get("devices", [])) for s in slices)
            assert device_types(slices) == EXPECTED_TYPES[strategy], (version, strategy)
            v_t = per_call(lambda sl=slices, v=version: validate_slices(sl, limits_for(v)), 0.5)
            rows.append((version, strategy, devices, len(slices), t * 1e3, t / base, v_t / t))
        rows.append((version, "exclusive", 16, len(base_slices), base * 1e3, 1.0, float("nan")))
    print("\nversion strategy  devices slices  build_ms  x_exclusive  validate/build")
    for r in rows:
        print(f"{r[0]:7} {r[1]:9} {r[2]:7} {r[3]:6} {r[4]:9.2f} {r[5]:12.1f} {r[6]:15.2f}")
