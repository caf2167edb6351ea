"""Set-up shared by the prepare benchmarks (tests/benchmarks/test_prepare_concurrency.py,
test_plugin_prepare_latency.py): the in-process Preparer that is their lower bound, the soft-slice claims
both paths prepare, rounds of concurrent prepares, percentiles, and py-spy sampling of the plugin process.

The in-process Preparer does the plugin's own work for a claim (limits file, region on its tmpfs when
`region_fs` allows, CDI spec, checkpoint records) without gRPC, a process boundary or a status writer, so a
figure over the socket divided by its figure is what the socket and the process add.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from support.driverroot import LAYOUTS, build_driver_root, hook_dir
from support.plugin_harness import result

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import HostLayout
from driver.plugin.state.checkpoint import Checkpoint
from driver.plugin.state.recovery import recover

GPUS = 2  # the fake node's two soft-sliced A100s (the plugin process's "0=soft,1=soft,exclusive")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def soft_results(i: int) -> list[dict]:
    """The allocation of one soft-slice claim (1 GiB, 10% of the cores) on GPU i % 2."""
    return [
        result("s", f"gpu-{i % GPUS}", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi", "cores": "10"})
    ]


class InProcessNode:
    """A Preparer called directly, on a driver root and plugin directory under `root`."""

    def __init__(
        self,
        root: Path,
        stub_cache: Path,
        region_fs: str = "off",
        run_dir: Path | None = None,
        cdi_dir: Path | None = None,
    ):
        limiter = hook_dir(root / "lib")
        (limiter / names.LIMITER_LIBRARY).touch()
        driver = build_driver_root(root / "root", LAYOUTS["rhel"], stub_cache)
        self.cluster = LocalCluster()
        catalog = {
            f"gpu-{i}": NodeDevice(
                f"gpu-{i}", names.TYPE_VGPU, f"GPU-{i}", i, {"memory": 80 << 30, "cores": 100}
            )
            for i in range(GPUS)
        }
        self.checkpoint_path = root / "plugin" / "checkpoint.json"
        self.preparer = Preparer(
            PreparerSettings("node-a", root / "plugin", cdi_dir or root / "cdi", limiter, run_dir),
            self.cluster,
            HostLayout.scan(driver, hook_dir=limiter),
            None,
            lambda: catalog,
            Checkpoint(self.checkpoint_path, "boot"),
        )
        self.preparer.region_fs = region_fs
        recover(self.preparer)

    def put_claim(self, name: str, results: list[dict]) -> ClaimRef:
        obj = self.cluster.put_resource_claim(
            {
                "metadata": {"name": name, "namespace": "b"},
                "status": {"allocation": {"devices": {"results": results}}},
            }
        )
        return ClaimRef("b", name, obj["metadata"]["uid"])

    def prepare_one(self, ref: ClaimRef) -> str:
        return self.preparer.prepare([ref])[ref.uid].error

    def unprepare(self, refs: list[ClaimRef]) -> None:
        errors = {uid: e for uid, e in self.preparer.unprepare(refs).items() if e}
        assert not errors, errors


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process `pid` has used (/proc/<pid>/stat), all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_rounds(
    prepare_one: Callable,
    unprepare_all: Callable,
    batches: list[list],
    cpu: Callable[[], float] | None = None,
    spent: list[float] | None = None,
    client: tuple[Callable[[], float], list[float]] | None = None,
    settle: tuple[float, list[float]] | None = None,
) -> list[float]:
    """Each batch: one thread per item released together by a barrier, one prepare each; then the batch is
    unprepared (outside the timing). Returns every prepare's latency; any prepare error fails. With `cpu`
    (a process's CPU seconds so far), the CPU time of each batch's prepares is appended to `spent`; with
    `client` (another clock, its list), the same for that clock (the fake kubelet's and API server's).
    With `settle` (seconds, a list), each batch starts after a pause of that long, in which the serving
    process finishes what the previous batch left it (claim status reports); the CPU it spent in the pause
    is appended to the list."""
    latencies: list[float] = []
    lock = threading.Lock()
    for batch in batches:
        if settle:
            quiet = cpu() if cpu else 0.0
            time.sleep(settle[0])
            settle[1].append((cpu() if cpu else 0.0) - quiet)
        before = cpu() if cpu else 0.0
        client_before = client[0]() if client else 0.0
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
        if cpu and spent is not None:
            spent.append(cpu() - before)
        if client:
            client[1].append(client[0]() - client_before)
        assert not errors, errors[:3]
        unprepare_all(batch)
    return latencies


def figures(label: str, v: list[float], base: list[float] | None = None) -> str:
    out = (
        f"[bench]   {label:34s} p50 {pct(v, 0.5) * 1e3:7.2f} ms  p99 {pct(v, 0.99) * 1e3:7.2f} ms  "
        f"mean {statistics.mean(v) * 1e3:7.2f} ms"
    )
    if base:
        ratio50, ratio99 = pct(v, 0.5) / pct(base, 0.5), pct(v, 0.99) / pct(base, 0.99)
        out += f"  ({ratio50:4.1f}x / {ratio99:4.1f}x the lower bound)"
    return out


@contextlib.contextmanager
def sampled(pid: int, out_dir: str | None, name: str = "plugin.folded") -> Iterator[None]:
    """py-spy samples process `pid` at 200 Hz (all threads, idle included) while the block runs, when
    `out_dir` is set and py-spy is installed; raw folded stacks go to `out_dir/name`. With
    CARVE_BENCH_PROFILE_GIL=1 only the thread holding the interpreter lock is sampled: where the serialized
    Python time goes, without threads waiting in a lock or a poll counted as running."""
    spy = None
    if out_dir and shutil.which("py-spy"):
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, name)
        threads = ["--gil"] if os.environ.get("CARVE_BENCH_PROFILE_GIL") == "1" else ["--threads", "--idle"]
        spy = subprocess.Popen(
            ["py-spy", "record", *threads, "-r", "200", "-f", "raw", "-o", out, "-p", str(pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
    try:
        yield
    finally:
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
            spy.wait(timeout=30)


class _SocketView:
    """What a Kubelet (tests/support/plugin_harness.py) reads of a node: the directory holding dra.sock and
    the registry directory. Lets a fake kubelet talk to a plugin process whose socket was moved aside."""

    def __init__(self, plugin_dir: Path, registry_dir: Path):
        self.plugin_dir = plugin_dir
        self.registry_dir = registry_dir


def second_process(node, first, strategy: str, extra: tuple = ()):
    """A second plugin process on `first`'s plugin directory (run, CDI and cluster alike), as during a
    rolling update: the upper bound of what more than one interpreter gains (issue 30, sixth pass).

    Both processes bind <plugin-dir>/dra.sock, so the first one's socket is renamed aside (a bound unix
    socket keeps serving under its new name) and reached through a directory whose dra.sock links to it;
    the second process registers in a registry directory of its own. Returns (second PluginProcess, the
    view of the first's socket to hand a Kubelet); the node itself now reaches the second process."""
    from support.plugin_harness import PluginProcess

    moved = node.plugin_dir / "dra1.sock"
    (node.plugin_dir / names.DRA_SOCKET).rename(moved)
    view = node.root / "v1"
    view.mkdir(exist_ok=True)
    link = view / names.DRA_SOCKET
    if link.is_symlink():
        link.unlink()
    link.symlink_to(moved)
    registry = node.root / "r2"  # short: a unix socket path has at most 107 bytes
    registry.mkdir(exist_ok=True)
    args_node = _SecondNode(node, registry)
    second = PluginProcess(args_node, strategy, extra=extra)
    second.log_path = node.root / "plugin-second.log"
    second.start()
    return second, _SocketView(view, node.registry_dir)


class _SecondNode:
    """`node` with its own registry directory: what PluginProcess reads to start a second process."""

    def __init__(self, node, registry: Path):
        self._node = node
        self.registry_dir = registry
        self.root = node.root

    def args(self, strategy: str, *extra: str) -> list[str]:
        args = self._node.args(strategy, *extra)
        args[args.index("--registry-dir") + 1] = str(self.registry_dir)
        return args


def claim_index(name: str) -> int:
    """The index a benchmark claim's name ends with (`<tag>-<i>`)."""
    return int(name.rsplit("-", 1)[1])


class PluginPair:
    """Two plugin processes served as one node by a fake kubelet: each claim to one of them by its index
    (4 of a round's 8 each); CPU is both processes' together."""

    def __init__(self, kubelets: tuple, pids: tuple[int, int]):
        self.kubelets = kubelets
        self.pids = pids

    def kubelet(self, claim: tuple[str, str, str]):
        return self.kubelets[claim_index(claim[1]) % 2]

    def prepare_one(self, claim: tuple[str, str, str]) -> str:
        return self.kubelet(claim).prepare([claim])[claim[2]]["error"]

    def unprepare(self, claims: list) -> None:
        for k in self.kubelets:
            mine = [c for c in claims if self.kubelet(c) is k]
            errors = {u: e for u, e in (k.unprepare(mine) if mine else {}).items() if e}
            assert not errors, errors

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)

    def close(self) -> None:
        for k in self.kubelets:
            k.close()
