"""Benchmark: prepare latency idle and with 8 claims preparing at once, over the kubelet socket and in process
(issue 30). Printed, never asserted.

The kubelet sends NodePrepareResources per pod, so on a busy node several single-claim calls overlap. A round
starts CONCURRENT threads released together, each sending one single-claim prepare (a soft slice) over the
real DRA gRPC socket of a real plugin process (fake NVML, file cluster, region tmpfs where the plugin may
mount it); then the round is unprepared. "Idle" is the same with one prepare at a time. The fake kubelet
keeps one gRPC connection, as the kubelet does; a dial per call (what this benchmark measured before issue
30's second pass) is printed too. The same rounds run against a Preparer called directly in this process
(tests/support/prepare_bench.py: the in-process lower bound).

On a shared machine the load moves every figure, so the paths are measured in blocks of BLOCK_ROUNDS rounds,
alternating path and order, REPEATS times in the same run; each line gives the median over the blocks of
the block's p50 and p99 (and the pooled p99 of all its prepares), and the socket's medians as ratios to the
lower bound's. Goal of issue 30: socket p99 <= 10 ms with 8 concurrent prepares on a 2-core machine.

Where the directories are, as in production: the plugin directory (checkpoint, locks) where the test's
directories are (pytest's tmp, or CARVE_BENCH_DIR), the run directory (claims' directories, --run-dir) and
the CDI directory on a tmpfs (CARVE_BENCH_RUN_DIR, default /dev/shm), as /run/carve and /var/run/cdi are on a
node; the output names each one's filesystem.

The API server: by default (CARVE_BENCH_CLUSTER=http) the plugin runs `--cluster kube` against the HTTP
stand-in of the API server (tests/support/apiserver_standin.py, in this process), so reading the claim and
writing its status go through the real `kubernetes` client as in a cluster; CARVE_BENCH_CLUSTER=file is the
file-backed stand-in the earlier passes used (its status writes fsync in the plugin process). The plugin
logs at CARVE_BENCH_LOG_LEVEL (default info, the chart's default).

CARVE_BENCH_PROFILE=<dir> samples the plugin process (and the two of "two processes") with py-spy (when
installed) while they serve, and writes the raw folded stacks there (docs/performance.md tells how they
were read); with CARVE_BENCH_PROFILE_GIL=1 only the thread holding the interpreter lock is sampled.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import pytest
from support.apiserver_standin import ApiServerStandIn
from support.mounts import unmount_under
from support.plugin_harness import FAKE_LIB_READY, FakeNode, Kubelet, PluginProcess
from support.prepare_bench import (
    InProcessNode,
    PluginPair,
    claim_index,
    cpu_seconds,
    pct,
    run_rounds,
    sampled,
    second_process,
    soft_results,
)

from driver.heap import freeze_startup_heap
from driver.plugin.claims.status import YIELD_S

CONCURRENT = 8
REPEATS = int(os.environ.get("CARVE_BENCH_REPEATS", "5"))
BLOCK_ROUNDS = int(os.environ.get("CARVE_BENCH_ROUNDS", "5"))  # per block: 5 rounds x 8 = 40 prepares
GOAL_P99_S = 0.010
# A settled round starts after a pause longer than a claim status report may wait for the kubelet's calls
# to end (YIELD_S): 8 pods landing on a node together after a quiet spell, as the kubelet sees them. The
# other rounds follow each other at once, each meeting the reports and unprepares the last one left: a
# stream of hundreds of prepares a second, far above the kubelet's pod start rate.
SETTLE_S = YIELD_S + 0.1
WIDTHS = {"idle": (1, 0.0), "8 at once": (CONCURRENT, 0.0), "8 at once, settled": (CONCURRENT, SETTLE_S)}


def block(
    put_claim,
    prepare_one,
    unprepare,
    width: int,
    tag: str,
    cpu,
    spent: list[float],
    client: list[float],
    settle_s: float = 0.0,
    background: list[float] | None = None,
) -> list[float]:
    """BLOCK_ROUNDS * CONCURRENT fresh claims prepared in rounds of `width`; the serving processes' CPU time
    of the prepares is added to `spent`, this process's (fake kubelet, API stand-in) to `client`; with
    `settle_s`, a pause before each round, the serving processes' CPU in it added to `background`."""
    count = BLOCK_ROUNDS * CONCURRENT
    claims = [put_claim(f"{tag}-{i}", soft_results(i)) for i in range(count)]
    batches = [claims[i : i + width] for i in range(0, count, width)]
    return run_rounds(
        prepare_one,
        unprepare,
        batches,
        cpu,
        spent,
        client=(lambda: cpu_seconds(os.getpid()), client),
        settle=(settle_s, background) if settle_s and background is not None else None,
    )


def filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on (the longest mount point above it in /proc/self/mounts)."""
    best, kind = "", "?"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point, fstype = line.split()[1:3]
        if str(path.resolve()).startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best, kind = point, fstype
    return kind


def summary(blocks: list[list[float]]) -> tuple[float, float, float]:
    """(median of the blocks' p50, median of the blocks' p99, p99 of every prepare), in seconds."""
    pooled = [v for b in blocks for v in b]
    return (
        statistics.median(pct(b, 0.5) for b in blocks),
        statistics.median(pct(b, 0.99) for b in blocks),
        pct(pooled, 0.99),
    )


def test_prepare_latency_idle_and_eight_at_once(tmp_path, stub_cache):
    if not FAKE_LIB_READY:
        pytest.fail("fake NVML not built: run `make native`")
    load = os.getloadavg()[0]
    # CARVE_BENCH_DIR=<dir>: the nodes' directories (plugin state, claims, CDI, cluster) under <dir> instead
    # of pytest's tmp_path, e.g. a tmpfs (/dev/shm) to see what the disk's filesystem costs a prepare.
    if os.environ.get("CARVE_BENCH_DIR"):
        tmp_path = Path(tempfile.mkdtemp(prefix="prepare-bench-", dir=os.environ["CARVE_BENCH_DIR"]))
    # The run directory and the CDI directory on a tmpfs, as /run/carve and /var/run/cdi on a node.
    run_base = Path(
        tempfile.mkdtemp(prefix="prepare-bench-run-", dir=os.environ.get("CARVE_BENCH_RUN_DIR", "/dev/shm"))
    )
    # The plugin process runs with --region-fs auto (its default): the lower bound does the same work.
    local = InProcessNode(
        tmp_path / "inproc",
        stub_cache,
        "auto",
        run_dir=run_base / "inproc-run",
        cdi_dir=run_base / "inproc-cdi",
    )
    node = FakeNode(tmp_path / "socket")
    node.run_dir, node.cdi_dir = run_base / "run", run_base / "cdi"
    cluster = os.environ.get("CARVE_BENCH_CLUSTER", "http")
    log_level = os.environ.get("CARVE_BENCH_LOG_LEVEL", "info")
    extra: tuple[str, ...] = ("--log-level", log_level)
    put_claim = node.put_claim
    server = None
    if cluster == "http":
        server = ApiServerStandIn().start()
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        extra += ("--cluster", "kube", "--kubeconfig", str(kubeconfig), "--k8s-version", "1.34")

        def put_claim(name: str, results: list[dict]) -> tuple[str, str, str]:
            stored = server.put_claim(
                {
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"devices": {"requests": [{"name": r["request"]} for r in results]}},
                    "status": {"allocation": {"devices": {"results": results}}},
                }
            )
            return ("default", name, stored["metadata"]["uid"])

    where = {
        "plugin dir": filesystem(node.plugin_dir.parent),
        "run dir": filesystem(run_base),
        "CDI dir": filesystem(run_base),
    }
    plugin = PluginProcess(node, "0=soft,1=soft,exclusive", extra=extra).start()
    kept, dialing = Kubelet(node, keep_connection=True), Kubelet(node)
    mine, served = (lambda: cpu_seconds(os.getpid())), (lambda: cpu_seconds(plugin.proc.pid))
    # "two processes": a second plugin process on the same plugin directory (a rolling update's state),
    # each claim to one of the two by its index, 4 of a round's 8 each: the upper bound of what more than
    # one interpreter gains (sixth pass). "two processes, own directories": two plugin processes of two
    # nodes, nothing shared, served the same way: what two processes cost without the shared checkpoint.
    twin_node = FakeNode(tmp_path / "twin")
    twin_node.run_dir, twin_node.cdi_dir = run_base / "twin-run", run_base / "twin-cdi"
    twin_first = PluginProcess(twin_node, "0=soft,1=soft,exclusive", extra=extra).start()
    twin_second, first_view = second_process(twin_node, twin_first, "0=soft,1=soft,exclusive", extra)
    twins = PluginPair(
        (Kubelet(first_view, keep_connection=True), Kubelet(twin_node, keep_connection=True)),
        (twin_first.proc.pid, twin_second.proc.pid),
    )
    apart_nodes = [FakeNode(tmp_path / f"apart{i}") for i in range(2)]
    for i, n in enumerate(apart_nodes):
        n.run_dir, n.cdi_dir = run_base / f"apart{i}-run", run_base / f"apart{i}-cdi"
    apart_procs = [PluginProcess(n, "0=soft,1=soft,exclusive", extra=extra).start() for n in apart_nodes]
    apart = PluginPair(
        tuple(Kubelet(n, keep_connection=True) for n in apart_nodes),
        tuple(p.proc.pid for p in apart_procs),
    )
    twin_put, apart_put = put_claim, put_claim
    if cluster == "file":
        twin_put = twin_node.put_claim

        def apart_put(name: str, results: list[dict]) -> tuple[str, str, str]:
            return apart_nodes[claim_index(name) % 2].put_claim(name, results)

    paths = {
        "in process": (local.put_claim, local.prepare_one, local.unprepare, mine),
        "socket": (
            put_claim,
            lambda c: kept.prepare([c])[c[2]]["error"],
            lambda cs: kept.unprepare(cs),
            served,
        ),
        "socket, a dial per call": (
            put_claim,
            lambda c: dialing.prepare([c])[c[2]]["error"],
            lambda cs: dialing.unprepare(cs),
            served,
        ),
        "two processes": (twin_put, twins.prepare_one, twins.unprepare, twins.cpu),
        "two processes, own directories": (apart_put, apart.prepare_one, apart.unprepare, apart.cpu),
    }
    results: dict[tuple[str, str], list[list[float]]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    client: dict[tuple[str, str], list[float]] = {}
    background: dict[tuple[str, str], list[float]] = {}
    # The plugin process freezes its start-up heap (driver/heap.py); the test process does the same for the
    # measurement, so neither the lower bound nor the fake kubelet and API stand-in (Go processes on a node)
    # pause for a full collection of pytest's heap in the middle of a round.
    freeze_startup_heap()
    try:
        profile = os.environ.get("CARVE_BENCH_PROFILE")
        with (
            sampled(plugin.proc.pid, profile),
            sampled(twin_first.proc.pid, profile, "twin-first.folded"),
            sampled(twin_second.proc.pid, profile, "twin-second.folded"),
        ):
            for rep in range(REPEATS):
                order = list(paths) if rep % 2 == 0 else list(reversed(paths))
                for path in order:
                    for label, (width, settle_s) in WIDTHS.items():
                        if path not in ("in process", "socket") and (width == 1 or settle_s):
                            continue
                        put, prepare_one, unprepare, clock = paths[path]
                        results.setdefault((path, label), []).append(
                            block(
                                put,
                                prepare_one,
                                unprepare,
                                width,
                                f"{rep}p{list(paths).index(path)}w{width}s{int(settle_s * 10)}",
                                clock,
                                cpu.setdefault((path, label), []),
                                client.setdefault((path, label), []),
                                settle_s,
                                background.setdefault((path, label), []),
                            )
                        )
    finally:
        gc.unfreeze()
        kept.close()
        plugin.stop()
        twins.close()
        apart.close()
        for p in (twin_second, twin_first, *apart_procs):
            p.stop()
        if server is not None:
            server.stop()
        unmount_under(run_base)
        shutil.rmtree(run_base, ignore_errors=True)
        if os.environ.get("CARVE_BENCH_DIR"):
            unmount_under(tmp_path)
            shutil.rmtree(tmp_path, ignore_errors=True)

    print(
        f"\n[bench] single-claim soft-slice prepares: {REPEATS} blocks of {BLOCK_ROUNDS * CONCURRENT} per "
        f"line, paths alternating; {os.cpu_count()} CPUs, load average {load:.1f} at the start"
    )
    print("[bench]   filesystems: " + ", ".join(f"{k} {v}" for k, v in where.items()))
    api = (
        "HTTP stand-in, real kubernetes client"
        if cluster == "http"
        else f"file stand-in on {filesystem(node.cluster_dir)}"
    )
    print(f"[bench]   API server: {api}; plugin log level {log_level}")
    print(
        "[bench]   (median of the blocks' p50 / p99, pooled p99; CPU: the serving processes' CPU time per "
        "prepare, the test process's in process; +client: the test process's (fake kubelet, API stand-in) "
        "on the other paths; x the lower bound's medians)"
    )
    for (path, label), blocks in results.items():
        p50, p99, pooled = summary(blocks)
        pool = [v for b in blocks for v in b]
        line = (
            f"[bench]   {path + ', ' + label:42s} p50 {p50 * 1e3:7.2f} ms  p99 {p99 * 1e3:7.2f} ms  "
            f"pooled p99 {pooled * 1e3:7.2f} ms  CPU {sum(cpu[(path, label)]) / len(pool) * 1e3:5.2f} ms"
        )
        if path != "in process":
            line += f" +client {sum(client[(path, label)]) / len(pool) * 1e3:5.2f} ms"
        if background.get((path, label)):
            line += f" +between rounds {sum(background[(path, label)]) / len(pool) * 1e3:5.2f} ms"

        if path != "in process":
            base50, base99, _ = summary(results[("in process", label)])
            line += f"  ({p50 / base50:4.1f}x / {p99 / base99:4.1f}x)"
        print(line)
    for label in ("8 at once", "8 at once, settled"):
        socket99, bound99 = summary(results[("socket", label)])[1], summary(results[("in process", label)])[1]
        met = "met" if socket99 <= GOAL_P99_S else "NOT met"
        print(
            f"[bench]   {label}: socket / in process p99 {socket99 / bound99:.2f}; "
            f"goal socket p99 <= 10 ms: {met}"
        )
