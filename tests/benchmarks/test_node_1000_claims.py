"""Benchmark: a node holding 1,000 prepared claims against the same node holding 10, in one run.

Printed, never asserted (tests/benchmarks/ is run by `make test`; `make bench` shows the figures). For each
size the real plugin process serves a fake kubelet over its unix sockets, with soft-slice claims spread over
the fake GPUs, and the benchmark measures:
- prepare and unprepare latency p50/p99 of further claims while the node holds N;
- the plugin's RSS and the CPU it spent per prepare+unprepare;
- restart recovery: SIGTERM, start again, until the plugin registered with its N claims loaded;
- the slice publish time the plugin logged at that start.
Then, in process, the checkpoint alone: bytes and time one change costs with N claims recorded (version 2's
log record) against a whole rewrite (what version 1 did on every change).
docs/reliability.md has a run's figures.
"""

from __future__ import annotations

import os
import re
import time
import uuid

import pytest
from support.plugin_harness import FAKE_LIB_READY, FakeNode, Kubelet, PluginProcess, result

from driver.plugin.state.checkpoint import STATE_COMPLETED, Checkpoint, ClaimRecord, DeviceRecord

# `make bench-scale` holds 1,000 (minutes on 2 cores); `make test` runs the same code with 200 (CI time).
SIZES = (10, int(os.environ.get("CARVE_BENCH_CLAIMS", "200")))
PROBES = 60
BATCH = 50
TICKS = os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def soft(i: int) -> list[dict]:
    return [
        result("s", f"gpu-{i % 2}", share_id=str(uuid.uuid4()), consumed={"memory": "256Mi", "cores": "1"})
    ]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def measure(tmp_path, held: int) -> dict:
    node = FakeNode(tmp_path / f"n{held}")
    kubelet = Kubelet(node)
    plugin = PluginProcess(node, "0=soft,1=soft,exclusive", extra=("--log-level", "info")).start()
    started = time.perf_counter()
    try:
        claims = [node.put_claim(f"held{i}", soft(i)) for i in range(held)]
        for k in range(0, held, BATCH):
            batch = claims[k : k + BATCH]
            out = kubelet.prepare(batch, timeout=120)
            assert all(out[c[2]]["error"] == "" for c in batch)
        fill_s = time.perf_counter() - started
        probes = [node.put_claim(f"probe{i}", soft(i)) for i in range(PROBES)]
        pid = plugin.proc.pid
        cpu0 = cpu_s(pid)
        prep, unprep = [], []
        for c in probes:
            t0 = time.perf_counter()
            assert kubelet.prepare([c])[c[2]]["error"] == ""
            t1 = time.perf_counter()
            assert kubelet.unprepare([c]) == {c[2]: ""}
            prep.append(t1 - t0)
            unprep.append(time.perf_counter() - t1)
        cpu_per_cycle = (cpu_s(pid) - cpu0) / PROBES
        rss = rss_kib(pid)
        plugin.stop()
        t0 = time.perf_counter()
        plugin.start(timeout_s=300)
        found = plugin.wait_for_log(r"event=checkpoint\.loaded status=ok claims=(\d+)", timeout_s=300)
        recovery = time.perf_counter() - t0
        assert int(found.group(1)) == held  # every held claim came back
        publish = [float(m) for m in re.findall(r"event=publish\.done.*? seconds=([0-9.]+)", plugin.log())]
    finally:
        plugin.stop()
    return {
        "prepare": prep,
        "unprepare": unprep,
        "cpu_ms": cpu_per_cycle * 1e3,
        "rss_mib": rss / 1024,
        "recovery_s": recovery,
        "fill_s": fill_s,
        "publish_s": publish[-1] if publish else float("nan"),
    }


@pytest.mark.timeout(1800)
def test_node_with_1000_claims_against_10(tmp_path):
    if not FAKE_LIB_READY:
        pytest.fail("fake NVML not built: run `make native`")
    runs = {n: measure(tmp_path, n) for n in SIZES}
    base, big = runs[SIZES[0]], runs[SIZES[1]]
    print(f"\n[bench] plugin process holding N soft claims; {PROBES} more prepared and unprepared one by one")
    print(f"[bench]   {'':24s} {'N=' + str(SIZES[0]):>12s} {'N=' + str(SIZES[1]):>12s} {'ratio':>8s}")

    def row(label: str, a: float, b: float, unit: str) -> None:
        ratio = b / a if a else float("nan")
        print(f"[bench]   {label:24s} {a:10.2f}{unit:>2s} {b:10.2f}{unit:>2s} {ratio:8.2f}")

    for kind in ("prepare", "unprepare"):
        for q in (0.5, 0.99):
            row(f"{kind} p{int(q * 100)}", pct(base[kind], q) * 1e3, pct(big[kind], q) * 1e3, "ms")
    row("CPU per cycle", base["cpu_ms"], big["cpu_ms"], "ms")
    row("plugin RSS", base["rss_mib"], big["rss_mib"], "Mi")
    row("restart recovery", base["recovery_s"], big["recovery_s"], "s")
    row("fill: time per held claim", base["fill_s"] / SIZES[0] * 1e3, big["fill_s"] / SIZES[1] * 1e3, "ms")
    row("slice publish at start", base["publish_s"] * 1e3, big["publish_s"] * 1e3, "ms")


def record(uid: str) -> ClaimRecord:
    cdi = [f"k8s.gpu.carve.dev/claim={uid}-gpu-0-{uid}"]
    return ClaimRecord(
        uid, "bench", f"c-{uid}", STATE_COMPLETED, [DeviceRecord(["s"], "node", "gpu-0", uid, cdi, "vgpu")]
    )


def checkpoint_cost(tmp_path, held: int, ops: int = 400) -> tuple[float, float, float, float]:
    """(bytes per change, seconds per change) for the log, then the same for a whole rewrite."""
    cp = Checkpoint(tmp_path / f"cp{held}" / "checkpoint.json", "boot")
    cp.path.parent.mkdir()
    state = {u: record(u) for u in (str(uuid.uuid4()) for _ in range(held))}
    cp.save(state)

    def sizes() -> int:
        return sum(p.stat().st_size for p in (cp.path, cp.log_path) if p.exists())

    written, t0 = 0, time.perf_counter()
    for i in range(ops):
        uid = f"probe-{i}"
        state[uid] = record(uid)
        before = sizes()
        snapshot_ino = cp.path.stat().st_ino
        cp.save(state, [uid])
        # a log append writes the growth; a fold rewrites the snapshot and empties the log
        written += sizes() - before if cp.path.stat().st_ino == snapshot_ino else sizes()
        del state[uid]
        before = sizes()
        snapshot_ino = cp.path.stat().st_ino
        cp.save(state, [uid])
        written += sizes() - before if cp.path.stat().st_ino == snapshot_ino else sizes()
    log_s = (time.perf_counter() - t0) / (2 * ops)
    whole_bytes, t0 = 0, time.perf_counter()
    for _ in range(ops // 4):
        cp.save(state)
        whole_bytes += cp.path.stat().st_size
    whole_s = (time.perf_counter() - t0) / (ops // 4)
    return written / (2 * ops), log_s, whole_bytes / (ops // 4), whole_s


def test_checkpoint_write_cost_does_not_grow_with_the_claims(tmp_path):
    costs = {n: checkpoint_cost(tmp_path, n) for n in SIZES}
    (b0, s0, wb0, ws0), (b1, s1, wb1, ws1) = costs[SIZES[0]], costs[SIZES[1]]
    print("\n[bench] checkpoint: one change with N claims recorded (log record; folds amortized)")
    print(f"[bench]   {'':28s} {'N=' + str(SIZES[0]):>12s} {'N=' + str(SIZES[1]):>12s} {'ratio':>8s}")
    print(f"[bench]   {'v2 bytes per change':28s} {b0:12.0f} {b1:12.0f} {b1 / b0:8.2f}")
    print(f"[bench]   {'v2 time per change':28s} {s0 * 1e3:10.3f}ms {s1 * 1e3:10.3f}ms {s1 / s0:8.2f}")
    print(f"[bench]   {'v1-style rewrite bytes':28s} {wb0:12.0f} {wb1:12.0f} {wb1 / wb0:8.2f}")
    print(f"[bench]   {'v1-style rewrite time':28s} {ws0 * 1e3:10.3f}ms {ws1 * 1e3:10.3f}ms {ws1 / ws0:8.2f}")
    print(f"[bench]   at N={SIZES[1]}: a whole rewrite writes {wb1 / b1:.0f}x the bytes of a v2 change")
