"""Allocator throughput: claims/s on 100 nodes x 8 GPUs (4 MIG A100 + 4 soft-sliced A100 per node).

Four runs in one process, after the CEL environment is built (a one-time cost, printed):
- as shipped: selector results cached per distinct input, fast path first;
- cel-python only: the same cache, every evaluation on cel-python (the fast path off);
- no cache: every selector evaluated on every device, for a tenth of the claims, once by cel-python
  (as before the cache) and once by the fast path (what it saves where inputs are all distinct).
Prints claims per CPU second, evaluations per claim, the cache hit rate and the ratios. Asserts
nothing about speed; asserts that every claim got a device that fits it and that all runs place the
claims identically.
"""

from __future__ import annotations

import random
import time

from driver.allocator import Allocator, Unallocatable, cel
from driver.devices.catalog import fake_gpu
from driver.devices.slices import build_slices

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
    out = []
    for n in range(NODES):
        node = f"node-{n:03d}"
        gpus = [fake_gpu("A100-80GB", i, node) for i in range(8)]
        out += build_slices(node, gpus, {i: "mig" if i < 4 else "soft" for i in range(8)})
    return out


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
    """(CPU seconds, the allocator, placements): CPU time, since this machine is shared and its wall
    time says more about the neighbours than about the allocator."""
    a = Allocator(slices, CLASSES, cel_cache=cache)
    placed = []
    start = time.process_time()
    for c in batch:
        try:
            allocation = a.allocate(c)
        except Unallocatable:
            placed.append(None)
            continue
        a.add_allocated({**c, "status": {"allocation": allocation}})
        placed.append([(r["pool"], r["device"]) for r in allocation["devices"]["results"]])
    return time.process_time() - start, a, placed


def test_allocator_throughput_with_and_without_cel_cache():
    started = time.perf_counter()
    cel.compile_selector(CLASSES[0]["spec"]["selectors"][0]["cel"]["expression"])
    warm_up_s = time.perf_counter() - started
    slices = cluster_slices()
    batch = claims(CLAIMS)
    cached_s, a, placed = _run(slices, batch, cache=True)
    stats = a.stats
    cel.Runners.fast = False
    try:
        slow_s, c, placed_slow = _run(slices, batch, cache=True)
        uncached_s, b, placed_uncached = _run(slices, batch[:CLAIMS_UNCACHED], cache=False)
    finally:
        cel.Runners.fast = True
    fast_s, f, placed_fast = _run(slices, batch[:CLAIMS_UNCACHED], cache=False)
    cached_rate = CLAIMS / cached_s
    slow_rate = CLAIMS / slow_s
    uncached_rate = CLAIMS_UNCACHED / uncached_s
    print(f"\nallocator: {stats['devices']} devices on {NODES} nodes, {CLAIMS} claims "
          f"({sum(p is not None for p in placed)} allocated); CEL environment built in {warm_up_s:.2f} s")
    print(f"  as shipped:        {cached_rate:8.1f} claims/s CPU  "
          f"(hit rate {stats['cel_cache_hit_rate']:.4f}, "
          f"{stats['cel_evaluations']} evaluations = {stats['cel_evaluations'] / CLAIMS:.3f} per claim, "
          f"{stats['cel_fast_path_answers']} by the fast path; "
          f"{stats['searches_skipped']} node searches skipped as unchanged)")
    print(f"  cel-python only:   {slow_rate:8.1f} claims/s CPU  ({c.stats['cel_evaluations']} evaluations)")
    print(f"  without CEL cache: {uncached_rate:8.1f} claims/s CPU  "
          f"({b.stats['cel_evaluations']} evaluations "
          f"= {b.stats['cel_evaluations'] / CLAIMS_UNCACHED:.0f} per claim, for {CLAIMS_UNCACHED} claims)")
    fast_rate = CLAIMS_UNCACHED / fast_s
    print(f"  no cache, fast path: {fast_rate:6.1f} claims/s CPU  ({f.stats['cel_fast_path_answers']} of "
          f"{f.stats['cel_evaluations']} evaluations on the fast path; {fast_rate / uncached_rate:.1f}x "
          "over cel-python)")
    print(f"  speed-up: {cached_rate / uncached_rate:.1f}x over no cache, "
          f"{cached_rate / slow_rate:.2f}x over cel-python only")
    check_placements(batch, placed)
    assert placed_slow == placed
    assert placed[:CLAIMS_UNCACHED] == placed_uncached == placed_fast


def check_placements(batch: list[dict], placed: list) -> None:
    """The timed work was done right: every claim fits (the cluster has room for all), MIG claims get an
    unshared instance of the profile they asked for, soft-slice claims never overcommit a GPU's memory."""
    assert None not in placed, f"{placed.count(None)} of {len(batch)} claims unallocated"
    mig_taken: set[tuple[str, str]] = set()
    memory_gi: dict[tuple[str, str], int] = {}
    for claim, results in zip(batch, placed, strict=True):
        name, req = claim["metadata"]["name"], claim["spec"]["devices"]["requests"][0]["exactly"]
        assert len(results) == 1, (name, results)
        pool, device = results[0]
        if req["deviceClassName"] == "mig.bench":
            profile = req["selectors"][0]["cel"]["expression"].split('"')[-2]
            assert f"-mig-{profile.replace('.', '')}-" in device, (name, profile, device)
            assert (pool, device) not in mig_taken, f"{pool}/{device} allocated twice"
            mig_taken.add((pool, device))
        else:
            # soft slices are whole GPUs 4-7 of each node
            assert "-mig-" not in device and int(device.rsplit("-", 1)[1]) >= 4, (name, device)
            key = (pool, device)
            asked = int(req["capacity"]["requests"]["memory"].removesuffix("Gi"))
            memory_gi[key] = memory_gi.get(key, 0) + asked
            assert memory_gi[key] <= 80, f"{pool}/{device} overcommitted: {memory_gi[key]}Gi of 80Gi"
