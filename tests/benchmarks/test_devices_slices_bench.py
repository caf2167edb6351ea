"""How long building and validating a node's ResourceSlices takes, per strategy (prints, asserts nothing).

Baseline: 16 GPUs, all `exclusive`. The plugin rebuilds slices on every inventory or strategy change and
the simulator builds them for every simulated node, so the cost per node matters at cluster scale.
"""

from __future__ import annotations

import time

from driver.devices import Settings, build_slices, limits_for, validate_slices
from driver.devices.catalog import fake_node

GPUS = fake_node("8xA100-80GB,8xH100-80GB", "bench-node")


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
        for strategy, settings in (("soft", None), ("slots", Settings(split_count=100)), ("mig", None)):
            strategies = dict.fromkeys(range(16), strategy)
            t = per_call(lambda s=strategies, c=settings, v=version: build_slices("n", GPUS, s, c, v))
            slices = build_slices("n", GPUS, strategies, settings, version)
            devices = sum(len(s["spec"].get("devices", [])) for s in slices)
            v_t = per_call(lambda sl=slices, v=version: validate_slices(sl, limits_for(v)), 0.5)
            rows.append((version, strategy, devices, len(slices), t * 1e3, t / base, v_t / t))
        rows.append((version, "exclusive", 16, 1, base * 1e3, 1.0, float("nan")))
    print("\nversion strategy  devices slices  build_ms  x_exclusive  validate/build")
    for r in rows:
        print(f"{r[0]:7} {r[1]:9} {r[2]:7} {r[3]:6} {r[4]:9.2f} {r[5]:12.1f} {r[6]:15.2f}")
