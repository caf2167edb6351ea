"""Benchmark: 8 claims preparing at once, over the kubelet socket and in process (issue 30).

Printed, never asserted. The kubelet sends NodePrepareResources per pod, so on a busy node several
single-claim calls overlap. Each round here starts CONCURRENT threads, each sending one single-claim prepare
over the real DRA gRPC socket of a real plugin process (fake NVML, file cluster, region tmpfs where the
plugin may mount it),
then unprepares them; the latency of every prepare call is recorded. The same rounds run against a Preparer
called directly in this process (the in-process lower bound: no gRPC, no API server round trip through a
process boundary) on the same disk in the same run, and the figures are printed side by side with ratios.
Goal of issue 30: socket p99 <= 10 ms with 8 concurrent prepares on a 2-core machine.

CARVE_BENCH_PROFILE=<dir> samples the plugin process with py-spy (when installed) while it serves, and
writes the flame data there (docs/performance.md tells how it was read).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import threading
import time
import uuid

import pytest
from support.driverroot import LAYOUTS, build_driver_root, hook_dir
from support.plugin_harness import FAKE_LIB_READY, FakeNode, Kubelet, PluginProcess, result

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import HostLayout
from driver.plugin.state.checkpoint import Checkpoint
from driver.plugin.state.recovery import recover

CONCURRENT = 8
ROUNDS = int(os.environ.get("CARVE_BENCH_ROUNDS", "25"))  # 25 rounds x 8 = 200 prepares per path


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def soft(i: int) -> list[dict]:
    return [
        result("s", f"gpu-{i % 2}", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi", "cores": "10"})
    ]


def run_rounds(prepare_one, unprepare_all, batches: list[list]) -> list[float]:
    """Each batch: CONCURRENT threads released together, one prepare each; then the batch is unprepared."""
    latencies: list[float] = []
    lock = threading.Lock()
    for batch in batches:
        gate = threading.Barrier(len(batch))
        errors: list[str] = []

        def worker(item, gate=gate, errors=errors):
            gate.wait()
            t0 = time.perf_counter()
            err = prepare_one(item)
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                if err:
                    errors.append(err)

        threads = [threading.Thread(target=worker, args=(item,)) for item in batch]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        unprepare_all(batch)
    return latencies


def line(label: str, v: list[float], base: list[float] | None = None) -> str:
    out = (
        f"[bench]   {label:28s} p50 {pct(v, 0.5) * 1e3:7.2f} ms  p99 {pct(v, 0.99) * 1e3:7.2f} ms  "
        f"mean {statistics.mean(v) * 1e3:7.2f} ms"
    )
    if base:
        ratio50, ratio99 = pct(v, 0.5) / pct(base, 0.5), pct(v, 0.99) / pct(base, 0.99)
        out += f"  ({ratio50:4.1f}x / {ratio99:4.1f}x the lower bound)"
    return out


def in_process(tmp_path, stub_cache) -> list[float]:
    limiter = hook_dir(tmp_path / "lib")
    (limiter / names.LIMITER_LIBRARY).touch()
    driver = build_driver_root(tmp_path / "root", LAYOUTS["rhel"], stub_cache)
    cluster = LocalCluster()
    catalog = {
        f"gpu-{i}": NodeDevice(f"gpu-{i}", names.TYPE_VGPU, f"GPU-{i}", i, {"memory": 80 << 30, "cores": 100})
        for i in range(2)
    }
    preparer = Preparer(
        PreparerSettings("node-a", tmp_path / "plugin", tmp_path / "cdi", limiter),
        cluster,
        HostLayout.scan(driver, hook_dir=limiter),
        None,
        lambda: catalog,
        Checkpoint(tmp_path / "plugin" / "checkpoint.json", "boot"),
    )
    recover(preparer)
    batches = []
    for r in range(ROUNDS):
        batch = []
        for i in range(CONCURRENT):
            name = f"c{r}-{i}"
            obj = cluster.put_resource_claim(
                {
                    "metadata": {"name": name, "namespace": "b"},
                    "status": {"allocation": {"devices": {"results": soft(i)}}},
                }
            )
            batch.append(ClaimRef("b", name, obj["metadata"]["uid"]))
        batches.append(batch)
    return run_rounds(
        lambda ref: preparer.prepare([ref])[ref.uid].error,
        lambda refs: preparer.unprepare(refs),
        batches,
    )


def over_socket(tmp_path) -> list[float]:
    node = FakeNode(tmp_path)
    kubelet = Kubelet(node)
    plugin = PluginProcess(node, "0=soft,1=soft,exclusive", extra=("--log-level", "warn")).start()
    spy = None
    out_dir = os.environ.get("CARVE_BENCH_PROFILE")
    if out_dir and shutil.which("py-spy"):
        os.makedirs(out_dir, exist_ok=True)
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--threads",
                "--idle",
                "-r",
                "200",
                "-f",
                "raw",
                "-o",
                os.path.join(out_dir, "plugin.folded"),
                "-p",
                str(plugin.proc.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
    try:
        batches = [[node.put_claim(f"c{r}-{i}", soft(i)) for i in range(CONCURRENT)] for r in range(ROUNDS)]
        lat = run_rounds(
            lambda c: kubelet.prepare([c])[c[2]]["error"],
            lambda cs: kubelet.unprepare(cs),
            batches,
        )
    finally:
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
            spy.wait(timeout=30)
        plugin.stop()
    return lat


def test_eight_concurrent_prepares(tmp_path, stub_cache):
    if not FAKE_LIB_READY:
        pytest.fail("fake NVML not built: run `make native`")
    base = in_process(tmp_path / "inproc", stub_cache)
    sock = over_socket(tmp_path / "socket")
    assert len(base) == len(sock) == ROUNDS * CONCURRENT
    print(f"\n[bench] {CONCURRENT} single-claim prepares at once, {ROUNDS} rounds, {os.cpu_count()} CPUs:")
    print(line("in process (lower bound)", base))
    print(line("kubelet socket", sock, base))
    print(f"[bench]   goal: socket p99 <= 10 ms: {'met' if pct(sock, 0.99) <= 0.010 else 'NOT met'}")
