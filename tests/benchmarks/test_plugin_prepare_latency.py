"""Benchmark: prepare+unprepare latency of soft-slice claims over the DRA socket, and what fsync costs.

Printed, never asserted. Part 1 runs the real plugin process and a fake kubelet (p50/p99 of one
prepare + unprepare round trip). Part 2 runs the Preparer in process and times every fsync, to show the
share of the checkpoint's fsyncs in a prepare/unprepare cycle (the baseline is the same run's total).
"""

from __future__ import annotations

import os
import statistics
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
from driver.plugin.state import checkpoint as checkpoint_module
from driver.plugin.state.checkpoint import Checkpoint
from driver.plugin.state.recovery import recover

ROUNDS = 150


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def soft_claim(node_or_cluster, i: int):
    return [
        result("s", f"gpu-{i % 2}", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi", "cores": "10"})
    ]


def test_prepare_unprepare_latency_over_socket(tmp_path):
    if not FAKE_LIB_READY:
        pytest.fail("fake NVML not built: run `make native`")
    node = FakeNode(tmp_path)
    kubelet = Kubelet(node)
    plugin = PluginProcess(node, "0=soft,1=soft,exclusive", extra=("--log-level", "warn")).start()
    try:
        claims = [node.put_claim(f"c{i}", soft_claim(node, i)) for i in range(ROUNDS)]
        prep, unprep = [], []
        for c in claims:
            t0 = time.perf_counter()
            assert kubelet.prepare([c])[c[2]]["error"] == ""
            t1 = time.perf_counter()
            assert kubelet.unprepare([c]) == {c[2]: ""}
            prep.append(t1 - t0)
            unprep.append(time.perf_counter() - t1)
    finally:
        plugin.stop()
    both = [a + b for a, b in zip(prep, unprep, strict=True)]
    print(f"\n[bench] plugin over socket, {ROUNDS} soft-slice claims, one per call:")
    for label, v in (("prepare", prep), ("unprepare", unprep), ("prepare+unprepare", both)):
        print(
            f"[bench]   {label:18s} p50 {pct(v, 0.5) * 1e3:7.2f} ms   p99 {pct(v, 0.99) * 1e3:7.2f} ms   "
            f"mean {statistics.mean(v) * 1e3:7.2f} ms"
        )


def test_fsync_share_of_prepare(tmp_path, monkeypatch, stub_cache):
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
    refs = []
    for i in range(ROUNDS):
        obj = cluster.put_resource_claim(
            {
                "metadata": {"name": f"c{i}", "namespace": "b"},
                "status": {"allocation": {"devices": {"results": soft_claim(cluster, i)}}},
            }
        )
        refs.append(ClaimRef("b", f"c{i}", obj["metadata"]["uid"]))

    spent = {"all": 0.0, "checkpoint": 0.0}
    in_checkpoint = {"on": False}
    real_fsync, real_save = os.fsync, Checkpoint.save

    def timed_fsync(fd):
        t0 = time.perf_counter()
        real_fsync(fd)
        dt = time.perf_counter() - t0
        spent["all"] += dt
        if in_checkpoint["on"]:
            spent["checkpoint"] += dt

    def flagged_save(self, claims, changed=None):
        in_checkpoint["on"] = True
        try:
            real_save(self, claims, changed)
        finally:
            in_checkpoint["on"] = False

    monkeypatch.setattr(os, "fsync", timed_fsync)
    monkeypatch.setattr(checkpoint_module.Checkpoint, "save", flagged_save)
    t0 = time.perf_counter()
    for ref in refs:
        assert preparer.prepare([ref])[ref.uid].error == ""
        assert preparer.unprepare([ref]) == {ref.uid: ""}
    total = time.perf_counter() - t0
    # the timed cycles did write the checkpoint durably, and left it empty once every claim was unprepared
    assert spent["checkpoint"] > 0
    after = Checkpoint(tmp_path / "plugin" / "checkpoint.json", "boot").load()
    assert (after.status, after.claims) == ("ok", {})
    print(f"\n[bench] in-process prepare+unprepare x{ROUNDS}: {total / ROUNDS * 1e3:.2f} ms per cycle")
    print(
        f"[bench]   all fsyncs        {spent['all'] / ROUNDS * 1e3:6.2f} ms per cycle  "
        f"({100 * spent['all'] / total:4.1f}% of the cycle)"
    )
    print(
        f"[bench]   checkpoint fsyncs {spent['checkpoint'] / ROUNDS * 1e3:6.2f} ms per cycle  "
        f"({100 * spent['checkpoint'] / total:4.1f}% of the cycle)"
    )
