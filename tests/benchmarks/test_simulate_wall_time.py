"""Wall time of `carve simulate`: 10,000 generated pods on 100 nodes (800 GPUs), printed, not asserted.

The full size takes minutes on a 2-core CI machine, so by default this runs a tenth of it (1,000 pods on
10 nodes, arrivals 10x sparser, so each node sees the same load) and prints the extrapolation: the cost
is CEL warm-up per node (selectors x devices, once per node) plus allocation per pod, both linear at fixed
load per node, hence x10. Set CARVE_BENCH_FULL=1 to run the full size. The baseline, in the same run, is
the same trace under `exclusive` (one device per GPU, the cheapest model to allocate from).
"""

from __future__ import annotations

import os
import time

from driver.simulate.auto import AutoPlanner
from driver.simulate.cluster import build_cluster
from driver.simulate.engine import Simulation
from driver.simulate.generator import generate
from driver.simulate.inputs import GenerateModel, NodeGroup
from driver.simulate.policies import POLICIES

FULL_PODS, FULL_NODES, FULL_GAP_S = 10_000, 100, 30.0


def _cluster(nodes: int) -> list[NodeGroup]:
    # 60% MIG-capable A100 nodes, 40% L4 nodes; auto starts them soft and lets the planner change them.
    a100 = nodes * 6 // 10
    return [NodeGroup("a100", a100, ("A100-80GB",) * 8, None),
            NodeGroup("l4", nodes - a100, ("L4",) * 8, None)]


def _timed(groups: list[NodeGroup], pods, strategy: str) -> tuple[float, dict, dict]:
    started = time.perf_counter()
    cluster = build_cluster(groups, strategy)
    auto = AutoPlanner(cluster) if strategy == "auto" else None  # the controller's planner decides
    result = Simulation(cluster, POLICIES["kube"], strategy, auto=auto).run(pods)
    elapsed = time.perf_counter() - started
    stats: dict[str, float] = {}
    for node in cluster.nodes:
        for key in ("cel_cache_hits", "cel_cache_misses", "claims_allocated", "claims_unallocatable"):
            stats[key] = stats.get(key, 0) + node.allocator.stats[key]
    return elapsed, result.report(), stats


def test_simulate_wall_time() -> None:
    full = os.environ.get("CARVE_BENCH_FULL", "") not in ("", "0")
    scale = 1 if full else 10
    pods_n, nodes = FULL_PODS // scale, FULL_NODES // scale
    pods = generate(GenerateModel(pods=pods_n, seed=1, interarrival_s=FULL_GAP_S * scale))
    groups = _cluster(nodes)

    auto_s, auto, stats = _timed(groups, pods, "auto")
    base_s, base, _ = _timed(groups, pods, "exclusive")

    lookups = stats["cel_cache_hits"] + stats["cel_cache_misses"]
    print()
    print(f"simulate: {pods_n} pods on {nodes} nodes ({nodes * 8} GPUs), node policy kube")
    print(f"  auto (planner):    {auto_s:7.2f} s  {pods_n / auto_s:7.1f} pods/s  "
          f"peak {auto['peak_gpus_busy']} GPUs, bound {auto['lower_bound_gpus']}, "
          f"scheduled {auto['pods_scheduled']}/{pods_n}, mean wait {auto['mean_wait_s']} s")
    print(f"  exclusive (base):  {base_s:7.2f} s  {pods_n / base_s:7.1f} pods/s  "
          f"peak {base['peak_gpus_busy']} GPUs, scheduled {base['pods_scheduled']}/{pods_n}")
    print(f"  ratio auto/exclusive wall time: {auto_s / base_s:.2f}")
    print(f"  allocations {stats['claims_allocated']:.0f} ok, {stats['claims_unallocatable']:.0f} failed; "
          f"CEL cache hit rate {stats['cel_cache_hits'] / lookups if lookups else 0:.3f}")
    if not full:
        print(f"  extrapolated to {FULL_PODS} pods on {FULL_NODES} nodes: ~{auto_s * scale:.0f} s (auto), "
              f"~{base_s * scale:.0f} s (exclusive); run it with CARVE_BENCH_FULL=1")
    # The timed runs did the work: the load fits the cluster, so every pod ran under both strategies, on
    # no more GPUs than exist and no fewer than the demand's lower bound.
    assert auto["pods_scheduled"] == base["pods_scheduled"] == pods_n
    for report in (auto, base):
        assert report["lower_bound_gpus"] <= report["peak_gpus_busy"] <= nodes * 8, report
    assert stats["claims_allocated"] >= pods_n
