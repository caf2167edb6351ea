"""Benchmark: prepare+unprepare latency of soft-slice claims over the DRA socket, and what fsync costs.

Printed, never asserted. Part 1 runs the real plugin process and a fake kubelet (p50/p99 of one
prepare + unprepare round trip). Part 2 runs the Preparer in process: p50/p99 of a prepare against the
10 ms target (issue 22), the fsyncs it makes (none: prepared state is per boot, driver/fsutil.py), what the
fsyncs of a durable prepare (DURABLE_FSYNCS, one file and one directory per file written) would add at this
disk's fsync latency measured in the same run, and where a prepare's time goes when above the target.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import time

import pytest
from support.plugin_harness import FAKE_LIB_READY, FakeNode, Kubelet, PluginProcess
from support.prepare_bench import InProcessNode, pct, soft_results

from driver.plugin.state import checkpoint as checkpoint_module
from driver.plugin.state.checkpoint import Checkpoint

ROUNDS = 150
DURABLE_FSYNCS = 8  # region, limits, CDI spec: file + directory each; checkpoint started + completed
TARGET_P99_S = 0.010  # issue 22: p99 of an in-process soft-claim prepare, spec written and fsynced


def where_time_goes(profile: cProfile.Profile, calls: int, top: int) -> list[str]:
    stats = pstats.Stats(profile)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # by own time
    out = []
    for (file, line, func), (_cc, _nc, own, cum, _callers) in rows:
        where = file.split("/work/", 1)[-1].split("site-packages/", 1)[-1]
        out.append(
            f"{own / calls * 1e3:6.3f} ms own, {cum / calls * 1e3:6.3f} ms cum  {func} ({where}:{line})"
        )
    return out


def test_prepare_unprepare_latency_over_socket(tmp_path):
    if not FAKE_LIB_READY:
        pytest.fail("fake NVML not built: run `make native`")
    node = FakeNode(tmp_path)
    kubelet = Kubelet(node, keep_connection=True)  # as the kubelet: one connection per plugin
    plugin = PluginProcess(node, "0=soft,1=soft,exclusive", extra=("--log-level", "warn")).start()
    try:
        claims = [node.put_claim(f"c{i}", soft_results(i)) for i in range(ROUNDS)]
        prep, unprep = [], []
        for c in claims:
            t0 = time.perf_counter()
            assert kubelet.prepare([c])[c[2]]["error"] == ""
            t1 = time.perf_counter()
            assert kubelet.unprepare([c]) == {c[2]: ""}
            prep.append(t1 - t0)
            unprep.append(time.perf_counter() - t1)
    finally:
        kubelet.close()
        plugin.stop()
    both = [a + b for a, b in zip(prep, unprep, strict=True)]
    print(f"\n[bench] plugin over socket, {ROUNDS} soft-slice claims, one per call:")
    for label, v in (("prepare", prep), ("unprepare", unprep), ("prepare+unprepare", both)):
        print(
            f"[bench]   {label:18s} p50 {pct(v, 0.5) * 1e3:7.2f} ms   p99 {pct(v, 0.99) * 1e3:7.2f} ms   "
            f"mean {statistics.mean(v) * 1e3:7.2f} ms"
        )


def test_fsync_share_of_prepare(tmp_path, monkeypatch, stub_cache):
    node = InProcessNode(tmp_path, stub_cache)
    preparer = node.preparer
    refs = [node.put_claim(f"c{i}", soft_results(i)) for i in range(ROUNDS)]

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
    prep_times = []
    t0 = time.perf_counter()
    for ref in refs[: ROUNDS // 2]:
        p0 = time.perf_counter()
        assert preparer.prepare([ref])[ref.uid].error == ""
        prep_times.append(time.perf_counter() - p0)
        assert preparer.unprepare([ref]) == {ref.uid: ""}
    timed = time.perf_counter() - t0
    # A second half under cProfile (it slows what it measures, so it is kept out of the figures above)
    profile = cProfile.Profile()
    for ref in refs[ROUNDS // 2 :]:
        profile.enable()
        assert preparer.prepare([ref])[ref.uid].error == ""
        profile.disable()
        assert preparer.unprepare([ref]) == {ref.uid: ""}
    total = time.perf_counter() - t0
    # the cycles wrote the checkpoint and left it empty once every claim was unprepared
    after = Checkpoint(node.checkpoint_path, "boot").load()
    assert (after.status, after.claims) == ("ok", {})
    print(
        f"\n[bench] in-process prepare+unprepare x{len(prep_times)}: "
        f"{timed / len(prep_times) * 1e3:.2f} ms per cycle"
    )
    p99 = pct(prep_times, 0.99)
    print(
        f"[bench]   prepare alone     p50 {pct(prep_times, 0.5) * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms  "
        f"(target p99 <= {TARGET_P99_S * 1e3:.0f} ms: {'met' if p99 <= TARGET_P99_S else 'NOT met'})"
    )
    if p99 > TARGET_P99_S:
        print("[bench]   where a prepare's time goes (cProfile, own time, top 8):")
        for line in where_time_goes(profile, ROUNDS - ROUNDS // 2, 8):
            print(f"[bench]     {line}")
    print(
        f"[bench]   fsyncs            {spent['all'] / ROUNDS * 1e3:6.2f} ms per cycle  "
        f"({100 * spent['all'] / total:4.1f}% of the cycle; "
        f"checkpoint's: {spent['checkpoint'] / ROUNDS * 1e3:.2f} ms)"
    )
    one = fsync_latency(tmp_path)
    print(
        f"[bench]   one fsync here    p50 {one * 1e3:6.2f} ms: a durable prepare's {DURABLE_FSYNCS} fsyncs "
        f"would add ~{DURABLE_FSYNCS * one * 1e3:.1f} ms ({DURABLE_FSYNCS * one / pct(prep_times, 0.5):.1f}x "
        "this run's p50 prepare)"
    )


def fsync_latency(tmp_path, n: int = 40) -> float:
    """p50 of writing 4 KiB and fsyncing it, on the disk the plugin's state lives on in this run."""
    times = []
    path = tmp_path / "fsync-probe"
    for _ in range(n):
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
            f.flush()
            t0 = time.perf_counter()
            os.fsync(f.fileno())
            times.append(time.perf_counter() - t0)
    return pct(times, 0.5)
