"""Benchmark: prepare latency idle and with 8 claims preparing at once, over the kubelet socket and in process
(issue 30). Printed, never asserted.

The kubelet sends NodePrepareResources per pod, so on a busy node several single-claim calls overlap. Each
round starts CONCURRENT threads released together, each sending one single-claim prepare (a soft slice)
over the real DRA gRPC socket of a real plugin process (fake NVML, file cluster, region tmpfs where the
plugin may mount it); then the round is unprepared. "Idle" is the same with one prepare at a time. The
fake kubelet keeps one gRPC connection, as the kubelet does; the figures of a dial per call (what this
benchmark measured before) are printed beside them. The same rounds run against a Preparer called directly
in this process (tests/support/prepare_bench.py: the in-process lower bound) in the same run, and the
socket's figures are printed as ratios to it.
Goal of issue 30: socket p99 <= 10 ms with 8 concurrent prepares on a 2-core machine.

CARVE_BENCH_PROFILE=<dir> samples the plugin process with py-spy (when installed) while it serves the
8-way rounds, and writes the raw folded stacks there (docs/performance.md tells how they were read).
"""

from __future__ import annotations

import os

import pytest
from support.plugin_harness import FAKE_LIB_READY, FakeNode, Kubelet, PluginProcess
from support.prepare_bench import InProcessNode, figures, pct, run_rounds, sampled, soft_results

CONCURRENT = 8
ROUNDS = int(os.environ.get("CARVE_BENCH_ROUNDS", "25"))  # 25 rounds x 8 = 200 prepares per path
GOAL_P99_S = 0.010


def batches(put_claim, width: int, tag: str) -> list[list]:
    """ROUNDS * CONCURRENT claims in rounds of `width`."""
    count = ROUNDS * CONCURRENT
    claims = [put_claim(f"{tag}{i}", soft_results(i)) for i in range(count)]
    return [claims[i : i + width] for i in range(0, count, width)]


def in_process(root, stub_cache) -> dict[str, list[float]]:
    # The plugin process below runs with --region-fs auto (its default): the lower bound does the same work.
    node = InProcessNode(root, stub_cache, region_fs="auto")
    out = {}
    for label, width in (("idle", 1), ("8 at once", CONCURRENT)):
        out[label] = run_rounds(node.prepare_one, node.unprepare, batches(node.put_claim, width, label[0]))
    return out


def over_socket(root) -> dict[str, list[float]]:
    node = FakeNode(root)
    plugin = PluginProcess(node, "0=soft,1=soft,exclusive", extra=("--log-level", "warn")).start()
    kept, dialing = Kubelet(node, keep_connection=True), Kubelet(node)
    out = {}
    try:
        for label, kubelet, width in (
            ("idle", kept, 1),
            ("8 at once", kept, CONCURRENT),
            ("8 at once, a dial per call", dialing, CONCURRENT),
        ):
            work = batches(node.put_claim, width, f"{len(out)}-")
            profile = os.environ.get("CARVE_BENCH_PROFILE") if label == "8 at once" else None
            with sampled(plugin.proc.pid, profile):
                out[label] = run_rounds(
                    lambda c, k=kubelet: k.prepare([c])[c[2]]["error"],
                    lambda cs, k=kubelet: k.unprepare(cs),
                    work,
                )
    finally:
        kept.close()
        plugin.stop()
    return out


def test_prepare_latency_idle_and_eight_at_once(tmp_path, stub_cache):
    if not FAKE_LIB_READY:
        pytest.fail("fake NVML not built: run `make native`")
    base = in_process(tmp_path / "inproc", stub_cache)
    sock = over_socket(tmp_path / "socket")
    assert all(len(v) == ROUNDS * CONCURRENT for v in (*base.values(), *sock.values()))
    count = ROUNDS * CONCURRENT
    print(f"\n[bench] single-claim soft-slice prepares, {count} per line, {os.cpu_count()} CPUs:")
    for label, values in base.items():
        print(figures(f"in process, {label} (lower bound)", values))
    for label, values in sock.items():
        print(figures(f"socket, {label}", values, base["idle" if label == "idle" else "8 at once"]))
    met = pct(sock["8 at once"], 0.99) <= GOAL_P99_S
    print(f"[bench]   goal: socket p99 <= 10 ms with {CONCURRENT} at once: {'met' if met else 'NOT met'}")
