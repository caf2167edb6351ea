"""The region watcher on real claim files: effective shares and high-priority marks in the plugin's limits
files (from the plugin's records, never the writable region), host pids, broken and hostile regions, its
thread, and the plugin process running it for the claims it prepared."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path

import pytest
from support.plugin_harness import result, slice_config

from driver import names
from driver.limits import ClaimLimits, DeviceLimit, Region, create_region, read_limits, write_limits
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.enforcement.regions import RegionWatcher
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord

GIB = 1 << 30


class Node:
    """Prepared claims as the plugin keeps them: checkpoint records, <claims>/<uid>/region/region and the
    plugin's <claims>/<uid>/limits/limits."""

    def __init__(self, root: Path):
        self.claims_dir = root / "claims"
        self.state: dict[str, ClaimRecord] = {}

    def add(self, uid: str, priority: str, *gpus: str, write: bool = True, cores: int = 30) -> Path:
        files = ClaimFiles(self.claims_dir / uid)
        devices = tuple(DeviceLimit(GIB, cores, uuid=g) for g in gpus)
        limits = ClaimLimits(devices=devices, region_path="/r", priority=priority)
        write_limits(files.limits, limits)
        if write:
            files.region.parent.mkdir(parents=True)
            create_region(files.region, limits)
        records = [
            DeviceRecord(["r"], "p", f"gpu-{i}", None, [], names.TYPE_VGPU, g) for i, g in enumerate(gpus)
        ]
        self.state[uid] = ClaimRecord(uid, "ns", uid, STATE_COMPLETED, records)
        return files.region

    def watcher(self, **kw) -> RegionWatcher:
        return RegionWatcher(lambda: self.state, self.claims_dir, **kw)


def limits(region: Path):
    return read_limits(region.parent.parent / "limits" / "limits")


def marks(region: Path) -> list[int]:
    return list(limits(region).high_neighbours)


def test_low_priority_devices_are_marked_with_their_gpus_high_claims(tmp_path):
    node = Node(tmp_path)
    low = node.add("low", "low", "GPU-A", "GPU-B")
    node.add("high-1", "high", "GPU-A")
    node.add("high-2", "high", "GPU-A", "GPU-C")
    lonely = node.add("low-alone", "low", "GPU-C")
    node.watcher().tick()
    assert marks(low) == [2, 0]
    assert marks(lonely) == [1]
    # a high claim goes away: the next pass lowers the count
    del node.state["high-2"]
    node.watcher().tick()
    assert marks(low) == [1, 0] and marks(lonely) == [0]


def test_unchanged_marks_are_not_rewritten(tmp_path):
    node = Node(tmp_path)
    low = node.add("low", "low", "GPU-A")
    node.add("high", "high", "GPU-A")
    watcher = node.watcher()
    watcher.tick()
    generation = limits(low).generation
    watcher.tick()
    assert limits(low).generation == generation  # limiters are not told about a change that did not happen


def test_host_pids_are_filled_from_the_nodes_proc(tmp_path):
    node = Node(tmp_path)
    path = node.add("c", "high", "GPU-A")
    # a /proc where host pid 4242 is pid 7 of a container's pid namespace
    proc = tmp_path / "proc"
    (proc / "4242" / "ns").mkdir(parents=True)
    (proc / "4242" / "ns" / "pid").touch()
    (proc / "4242" / "status").write_text("Name:\tpython\nNSpid:\t4242\t7\n")
    (proc / "self").mkdir()
    with Region.open(path) as r:
        slot = r._struct.procs[5]
        slot.pid, slot.host_pid, slot.pid_ns = 7, 0, os.stat(proc / "4242" / "ns" / "pid").st_ino
        del slot
    node.watcher(proc_root=proc).tick()
    with Region.open(path) as r:
        assert [(p.pid, p.host_pid) for p in r.processes()] == [(7, 4242)]


def test_missing_and_corrupt_regions_are_logged_once_and_skipped(tmp_path, caplog):
    node = Node(tmp_path)
    node.add("missing", "low", "GPU-A", write=False)
    corrupt = node.add("corrupt", "low", "GPU-A")
    corrupt.write_bytes(b"garbage")
    low = node.add("low", "low", "GPU-A")
    node.add("high", "high", "GPU-A")
    watcher = node.watcher()
    with caplog.at_level(logging.INFO, logger="driver.plugin.enforcement.regions"):
        for _ in range(3):
            watcher.tick()
    skipped = [r for r in caplog.records if r.getMessage() == "regions.skipped"]
    assert sorted(r.fields["uid"] for r in skipped) == ["corrupt", "missing"]
    assert "cannot open" in next(r.fields["error"] for r in skipped if r.fields["uid"] == "missing")
    assert marks(low) == [1]  # the others are served all the same
    # repaired: the watcher says so and marks it
    create_region(
        corrupt, ClaimLimits(devices=(DeviceLimit(GIB, 30, uuid="GPU-A"),), region_path="/r", priority="low")
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="driver.plugin.enforcement.regions"):
        watcher.tick()
    assert [r.fields["uid"] for r in caplog.records if r.getMessage() == "regions.recovered"] == ["corrupt"]
    assert marks(corrupt) == [1]


def test_the_thread_survives_errors_and_stops_cleanly(tmp_path, caplog):
    node = Node(tmp_path)
    low = node.add("low", "low", "GPU-A")
    node.add("high", "high", "GPU-A")
    calls = {"n": 0}

    def state():
        calls["n"] += 1
        if calls["n"] <= 3:
            raise RuntimeError("checkpoint being rewritten")
        return node.state

    watcher = RegionWatcher(state, node.claims_dir, interval_s=0.02)
    with caplog.at_level(logging.WARNING, logger="driver.plugin.enforcement.regions"):
        watcher.start()
        deadline = time.monotonic() + 5
        while marks(low) != [1] and time.monotonic() < deadline:
            time.sleep(0.02)
        watcher.stop()
    assert marks(low) == [1]
    assert not watcher.running
    failures = [r for r in caplog.records if r.getMessage() == "regions.tick-failed"]
    assert len(failures) == 1 and "checkpoint being rewritten" in failures[0].fields["error"]


def test_plugin_marks_its_low_priority_claims_and_stops_the_watcher(node, kubelet, plugin_factory):
    plugin = plugin_factory("soft")  # the watcher passes every 2 s (PluginConfig.region_interval_s)
    share = lambda: str(uuid.uuid4())  # noqa: E731
    low = node.put_claim(
        "low",
        [result("s", "gpu-1", share_id=share(), consumed={"memory": "4Gi", "cores": "30"})],
        [slice_config(priority="low")],
    )
    high = node.put_claim(
        "high", [result("s", "gpu-1", share_id=share(), consumed={"memory": "4Gi", "cores": "50"})]
    )
    out = kubelet.prepare([low, high])
    assert {u: r["error"] for u, r in out.items()} == {low[2]: "", high[2]: ""}
    plugin.wait_for_log(rf"event=regions.limits-updated uid={low[2]} shares=30 high_neighbours=1")
    region = ClaimFiles(node.plugin_dir / "claims" / low[2]).region
    assert marks(region) == [1]
    assert kubelet.unprepare([high]) == {high[2]: ""}
    plugin.wait_for_log(rf"event=regions.limits-updated uid={low[2]} shares=30 high_neighbours=0")
    assert plugin.stop() == 0
    assert "regions.tick-failed" not in plugin.log()


@pytest.fixture(autouse=True)
def _no_stray_threads():
    yield
    import threading

    assert not [t for t in threading.enumerate() if t.name == "region-watcher"]


def test_priority_and_gpus_come_from_the_plugins_records_not_the_writable_region(tmp_path):
    node = Node(tmp_path)
    low = node.add("low", "low", "GPU-A")
    tenant = node.add("tenant", "low", "GPU-B")
    with Region.open(tenant) as r:  # the tenant marks itself high priority on the low claim's GPU
        r._struct.priority = 0
        r._struct.devices[0].uuid = b"GPU-A"
    node.watcher().tick()
    assert marks(low) == [0]  # nobody high shares GPU-A
    # a limits file naming a GPU that is not the claim's in the checkpoint is not believed either
    write_limits(
        ClaimFiles(node.claims_dir / "tenant").limits,
        ClaimLimits((DeviceLimit(GIB, 30, uuid="GPU-A"),), "/r", priority="high"),
    )
    watcher = node.watcher()
    watcher.tick()
    assert marks(low) == [0]


def test_best_effort_claims_get_what_the_reservations_leave(tmp_path):
    node = Node(tmp_path)
    reserved = node.add("reserved", "high", "GPU-A", cores=60)
    best = node.add("best-effort", "high", "GPU-A", "GPU-B", cores=0)
    node.watcher().tick()
    assert limits(reserved).cores_limits == (60,)
    assert limits(best).cores_limits == (40, 0)  # GPU-B has no reservation: no limit there
    assert limits(best).cores_reserved == (0, 0)
    del node.state["reserved"]
    node.watcher().tick()
    assert limits(best).cores_limits == (0, 0)


@pytest.mark.parametrize("kind", ["symlink-to-device", "fifo"])
def test_a_region_replaced_by_a_link_or_a_node_is_not_opened(tmp_path, caplog, kind):
    node = Node(tmp_path)
    region = node.add("c", "high", "GPU-A")
    region.unlink()
    if kind == "fifo":
        os.mkfifo(region)  # a blocking open would hang the watcher for good
    else:
        region.symlink_to("/dev/zero")
    with caplog.at_level(logging.WARNING, logger="driver.plugin.enforcement.regions"):
        node.watcher().tick()
    (skipped,) = [r for r in caplog.records if r.getMessage() == "regions.skipped"]
    assert ("symlink" if kind != "fifo" else "not a regular file") in skipped.fields["error"]


def test_a_region_a_container_grew_is_cut_back_to_its_size(tmp_path, caplog):
    node = Node(tmp_path)
    region = node.add("c", "high", "GPU-A")
    size = region.stat().st_size
    with open(region, "ab") as f:
        f.truncate(size + (64 << 20))
    with caplog.at_level(logging.WARNING, logger="driver.plugin.enforcement.regions"):
        node.watcher().tick()
    assert region.stat().st_size == size
    assert [r.fields["uid"] for r in caplog.records if r.getMessage() == "regions.oversized"] == ["c"]


def test_a_pod_that_joined_a_shared_claim_after_prepare_is_found_through_its_reserved_for(tmp_path):
    # The kubelet prepares a claim once, for its first pod; a second pod sharing it runs a process the
    # checkpoint's pods do not name. The watcher reads the claim's reservedFor again (rate-limited) and the
    # process is the claim's before the cross-check's second pass could call it unenforced.
    from support.cgroups import pod_uid, write_cgroup

    from driver.cluster.local import LocalCluster
    from driver.plugin.enforcement.crosscheck import GpuProcess
    from driver.plugin.enforcement.enforcer import Enforcer

    node = Node(tmp_path)
    node.add("shared", "high", "GPU-A")
    first, second = pod_uid(1), pod_uid(2)
    node.state["shared"].pods = [first]
    proc = tmp_path / "proc"
    write_cgroup(proc, 10, first)
    write_cgroup(proc, 20, second)
    cluster = LocalCluster()
    reserved = [{"resource": "pods", "name": n, "uid": u} for n, u in (("a", first), ("b", second))]
    cluster.put_resource_claim(
        {
            "metadata": {"name": "shared", "namespace": "ns", "uid": "shared"},
            "status": {"reservedFor": reserved},
        }
    )
    procs = {"GPU-A": [GpuProcess(10, 1 << 20), GpuProcess(20, 1 << 20)]}
    enforcer = Enforcer("n", cluster, False, processes=lambda _g: procs, proc_root=proc, utilization=None)
    watcher = node.watcher(proc_root=proc, enforcer=enforcer, claims=cluster)
    for _ in range(3):
        watcher.tick()
        assert enforcer.findings.unenforced == []
    assert cluster.events == []
    # without the API server to ask, the second pod's process is another pod's: reported from pass two
    enforcer = Enforcer("n", None, False, processes=lambda _g: procs, proc_root=proc, utilization=None)
    blind = node.watcher(proc_root=proc, enforcer=enforcer)
    blind.tick()
    blind.tick()
    assert [u.pid for u in enforcer.findings.unenforced] == [20]
