"""Allocator throughput: claims/s on 100 nodes x 8 GPUs (4 MIG A100 + 4 soft-sliced A100 per node).

Prints claims/s with and without the CEL result cache, the cache hit rate, and the ratio between
the two runs. Asserts only that both runs allocate the same claims to the same devices.
"""

from __future__ import annotations

import random
import time

from driver.allocator import Allocator, Unallocatable

NODES = 100
CLAIMS = 1500
CLAIMS_UNCACHED = 150
CLASSES = [
    {"metadata": {"name": "mig.bench"}, "spec": {"selectors": [{"cel": {"expression":
        'device.driver == "gpu.carve.dev" && device.attributes["gpu.carve.dev"].type == "mig"'}}]}},
    {"metadata": {"name": "vgpu.bench"}, "spec": {"selectors": [{"cel": {"expression":
        'device.driver == "gpu.carve.dev" && device.attributes["gpu.carve.dev"].type == "vgpu"'}}]}},
]


def cluster_slices() -> list[dict]:
    try:
        from driver.devices.catalog import fake_gpu
        from driver.devices.slices import build_slices
    except ImportError:  # the device model is another component; fall back to a hand-rolled node
        return [s for n in range(NODES) for s in _hand_rolled(f"node-{n:03d}")]
    out = []
    for n in range(NODES):
        node = f"node-{n:03d}"
        gpus = [fake_gpu("A100-80GB", i, node) for i in range(8)]
        out += build_slices(node, gpus, {i: "mig" if i < 4 else "soft" for i in range(8)})
    return out


def _hand_rolled(node: str) -> list[dict]:
    devices, counters = [], []
    for g in range(8):
        attrs = {"uuid": {"string": f"{node}-gpu-{g}"}, "index": {"int": g}}
        if g < 4:
            counters.append({"name": f"gpu-{g}", "counters": {"memory": {"value": "80Gi"},
                                                              "slices": {"value": "7"}}})
            for k, (profile, size) in enumerate([("1g.10gb", 1)] * 7 + [("3g.40gb", 3)] * 2):
                devices.append({"name": f"gpu-{g}-mig-{k}", "attributes": {
                    **attrs, "type": {"string": "mig"}, "profile": {"string": profile}},
                    "consumesCounters": [{"counterSet": f"gpu-{g}", "counters": {
                        "memory": {"value": f"{10 * size}Gi"}, "slices": {"value": str(size)}}}]})
        else:
            devices.append({"name": f"gpu-{g}", "attributes": {**attrs, "type": {"string": "vgpu"}},
                            "allowMultipleAllocations": True, "capacity": {
                                "memory": {"value": "80Gi", "requestPolicy": {
                                    "default": "8Gi", "validRange": {"min": "256Mi", "step": "256Mi"}}},
                                "cores": {"value": "100"}}})
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return [{"metadata": {"name": f"{node}-0"}, "spec": {
        "driver": "gpu.carve.dev", "nodeName": node, "pool": pool, "devices": devices,
        "sharedCounters": counters}}]


def claims(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.6:
            req = {"name": "gpu", "exactly": {"deviceClassName": "vgpu.bench", "capacity": {"requests": {
                "memory": f"{rng.choice([2, 4, 8, 12])}Gi", "cores": str(rng.choice([10, 20, 30]))}}}}
        else:
            profile = rng.choice(["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"])
            req = {"name": "gpu", "exactly": {"deviceClassName": "mig.bench", "selectors": [{"cel": {
                "expression": f'device.attributes["gpu.carve.dev"].profile == "{profile}"'}}]}}
        out.append({"metadata": {"name": f"claim-{i}", "namespace": "bench"},
                    "spec": {"devices": {"requests": [req]}}})
    return out


def _run(slices: list[dict], batch: list[dict], cache: bool) -> tuple[float, Allocator, list]:
    a = Allocator(slices, CLASSES, cel_cache=cache)
    placed = []
    start = time.perf_counter()
    for c in batch:
        try:
            allocation = a.allocate(c)
        except Unallocatable:
            placed.append(None)
            continue
        a.add_allocated({**c, "status": {"allocation": allocation}})
        placed.append([(r["pool"], r["device"]) for r in allocation["devices"]["results"]])
    return time.perf_counter() - start, a, placed


def test_allocator_throughput_with_and_without_cel_cache():
    slices = cluster_slices()
    batch = claims(CLAIMS)
    cached_s, a, placed = _run(slices, batch, cache=True)
    stats = a.stats
    uncached_s, b, placed_uncached = _run(slices, batch[:CLAIMS_UNCACHED], cache=False)
    cached_rate = CLAIMS / cached_s
    uncached_rate = CLAIMS_UNCACHED / uncached_s
    print(f"\nallocator: {stats['devices']} devices on {NODES} nodes, {CLAIMS} claims "
          f"({sum(p is not None for p in placed)} allocated)")
    print(f"  with CEL cache:    {cached_rate:8.1f} claims/s  (hit rate {stats['cel_cache_hit_rate']:.4f}, "
          f"{stats['cel_evaluations']} evaluations)")
    print(f"  without CEL cache: {uncached_rate:8.1f} claims/s  ({b.stats['cel_evaluations']} evaluations "
          f"for {CLAIMS_UNCACHED} claims)")
    print(f"  speed-up from the cache: {cached_rate / uncached_rate:.1f}x")
    assert placed[:CLAIMS_UNCACHED] == placed_uncached
