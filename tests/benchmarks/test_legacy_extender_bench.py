"""Benchmark: the extender's filter + prioritize + bind latency at 100 nodes x 8 GPUs with 1,000 bound pods.

Printed, never asserted (beyond checking the work was done). The baseline is the same cluster with no
bound pods, measured in the same run; the ratio shows what the bound pods cost. The API is in memory, so
the figures are the extender's own work (fit, scores, records), not the API server's latency.
"""

from __future__ import annotations

import time

from support.legacy_node import NAMESPACE, gpu_pod, inventory_node

from driver import names
from driver.legacy.extender.state import ExtenderState
from driver.legacy.extender.verbs import Extender
from driver.legacy.kubeapi import MemoryLegacyApi

NODES, GPUS, BOUND, MEASURED = 100, 8, 1000, 100


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cluster(bound: int) -> tuple[MemoryLegacyApi, Extender, list[str]]:
    api = MemoryLegacyApi()
    nodes = [f"n{i:03d}" for i in range(NODES)]
    for n in nodes:
        api.add_node(inventory_node(n, gpus=GPUS, memory_mib=81920, split=10))
    state = ExtenderState(api, NAMESPACE)
    state.resync()
    ext = Extender(state)
    for i in range(bound):
        pod = gpu_pod(f"bound-{i}", [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 4000})])
        api.add_pod(pod)
        res = ext.bind(
            {
                "PodName": f"bound-{i}",
                "PodNamespace": "team",
                "PodUID": f"uid-bound-{i}",
                "Node": nodes[i % NODES],
            }
        )
        assert res == {"Error": ""}
    return api, ext, nodes


def measure(ext: Extender, api: MemoryLegacyApi, nodes: list[str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": [], "total": []}
    for i in range(MEASURED):
        pod = gpu_pod(
            f"new-{i}",
            [("main", {names.LEGACY_GPU: 2, names.LEGACY_GPUMEM: 8000, names.LEGACY_GPUCORES: 20})],
        )
        api.add_pod(pod)
        t0 = time.perf_counter()
        fitting = ext.filter({"Pod": pod, "NodeNames": nodes})["NodeNames"]
        t1 = time.perf_counter()
        scores = ext.prioritize({"Pod": pod, "NodeNames": fitting})
        t2 = time.perf_counter()
        best = max(scores, key=lambda h: h["Score"])["Host"]
        assert ext.bind(
            {"PodName": f"new-{i}", "PodNamespace": "team", "PodUID": f"uid-new-{i}", "Node": best}
        ) == {"Error": ""}
        t3 = time.perf_counter()
        for key, value in (
            ("filter", t1 - t0),
            ("prioritize", t2 - t1),
            ("bind", t3 - t2),
            ("total", t3 - t0),
        ):
            times[key].append(value)
    return times


def test_extender_latency_at_100_nodes_8_gpus_1000_pods():
    api0, ext0, nodes0 = cluster(0)
    base = measure(ext0, api0, nodes0)
    api, ext, nodes = cluster(BOUND)
    loaded = measure(ext, api, nodes)
    assert len(api.bindings) == BOUND + MEASURED
    print(f"\nextender at {NODES} nodes x {GPUS} GPUs, {MEASURED} pods scheduled (2 GPUs x 8000 MiB each):")
    for key in ("filter", "prioritize", "bind", "total"):
        p50, p99 = pct(loaded[key], 0.5) * 1e3, pct(loaded[key], 0.99) * 1e3
        ratio = pct(loaded[key], 0.5) / max(pct(base[key], 0.5), 1e-9)
        print(
            f"  {key:10s} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  (x{ratio:.2f} of the same with no bound pods)"
        )
