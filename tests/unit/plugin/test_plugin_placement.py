"""The plugin's published order of shareable devices (--placement, driver/plugin/placement.py)."""

from __future__ import annotations

import threading
import time

import pytest

from driver import names
from driver.devices import Settings
from driver.devices.catalog import fake_gpu
from driver.devices.slices import build_slices
from driver.limits.env import ClaimLimits, DeviceLimit
from driver.plugin.placement import (
    Coalescer,
    Load,
    MemoryBook,
    gpu_loads,
    order_devices,
    shareable_order,
)
from driver.plugin.state.checkpoint import ClaimRecord, DeviceRecord

GIB = 1 << 30


def _slices(strategies: dict[int, str]) -> tuple[list[dict], dict[str, str]]:
    gpus = [fake_gpu("A100-80GB", i, "node-a") for i in range(4)]
    built = build_slices("node-a", gpus, strategies, Settings(), "1.36")
    return built, {g.name: g.uuid for g in gpus}


def _names(slices: list[dict]) -> list[str]:
    return [d["name"] for s in slices for d in s["spec"].get("devices") or []]


def test_binpack_puts_the_most_loaded_gpu_first_and_spread_the_least():
    built, uuid = _slices({i: names.STRATEGY_SOFT for i in range(4)})
    loads = {uuid["gpu-2"]: Load(8 * GIB, 1), uuid["gpu-1"]: Load(2 * GIB, 1)}
    assert shareable_order(order_devices(built, loads, "binpack")) == ("gpu-2", "gpu-1", "gpu-0", "gpu-3")
    assert shareable_order(order_devices(built, loads, "spread")) == ("gpu-0", "gpu-3", "gpu-1", "gpu-2")
    assert shareable_order(order_devices(built, loads, "index")) == ("gpu-0", "gpu-1", "gpu-2", "gpu-3")


def test_ties_go_back_to_index_order_whatever_the_order_given():
    # What the plugin compares against is what it published last (already reordered): once the load is
    # gone, both policies must give index order again, not keep the stale one.
    built, uuid = _slices({i: names.STRATEGY_SOFT for i in range(4)})
    reordered = order_devices(
        built, {uuid["gpu-3"]: Load(GIB, 1), uuid["gpu-1"]: Load(2 * GIB, 1)}, "binpack"
    )
    assert shareable_order(reordered) == ("gpu-1", "gpu-3", "gpu-0", "gpu-2")
    for placement in ("binpack", "spread"):
        assert shareable_order(order_devices(reordered, {}, placement)) == (
            "gpu-0",
            "gpu-1",
            "gpu-2",
            "gpu-3",
        )


def test_memory_decides_before_the_number_of_shares_and_ties_keep_index_order():
    built, uuid = _slices({i: names.STRATEGY_SOFT for i in range(4)})
    loads = {
        uuid["gpu-0"]: Load(4 * GIB, 4),
        uuid["gpu-1"]: Load(6 * GIB, 1),
        uuid["gpu-2"]: Load(4 * GIB, 5),
        uuid["gpu-3"]: Load(4 * GIB, 5),
    }
    assert shareable_order(order_devices(built, loads, "binpack")) == ("gpu-1", "gpu-2", "gpu-3", "gpu-0")
    assert shareable_order(order_devices(built, loads, "spread")) == ("gpu-0", "gpu-2", "gpu-3", "gpu-1")


def test_only_shareable_devices_move_and_nothing_else_changes():
    # gpu-0 whole, gpu-1 slots, gpu-2 and gpu-3 soft: only the two soft devices trade places.
    strategies = {0: names.STRATEGY_EXCLUSIVE, 1: names.STRATEGY_SLOTS, 2: "soft", 3: "soft"}
    built, uuid = _slices(strategies)
    before = _names(built)
    out = order_devices(built, {uuid["gpu-3"]: Load(GIB, 1)}, "binpack")
    after = _names(out)
    assert after != before
    assert sorted(after) == sorted(before)
    moved = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert sorted(before[i] for i in moved) == ["gpu-2", "gpu-3"]
    # The same devices, byte for byte, and the same slices with the same metadata and pool.
    by_name = {d["name"]: d for s in built for d in s["spec"]["devices"]}
    assert all(d == by_name[d["name"]] for s in out for d in s["spec"]["devices"])
    assert [(s["metadata"], s["spec"]["pool"]) for s in out] == [
        (s["metadata"], s["spec"]["pool"]) for s in built
    ]
    assert _names(built) == before  # the input is left as it was


def test_gpu_loads_sum_memory_and_shares_per_gpu_leaving_admin_out():
    def dev(uuid: str, admin: bool = False) -> DeviceRecord:
        return DeviceRecord(["r"], "node-a", "gpu-0", "s", [], type="vgpu", gpu_uuid=uuid, admin=admin)

    records = [
        ClaimRecord("a", "ns", "a", "PrepareCompleted", [dev("U0")]),
        ClaimRecord("b", "ns", "b", "PrepareCompleted", [dev("U0"), dev("U1")]),
        ClaimRecord("c", "ns", "c", "PrepareCompleted", [dev("U1", admin=True)]),
    ]
    memory = {"a": {"U0": 2 * GIB}, "b": {"U0": GIB, "U1": 3 * GIB}}
    assert gpu_loads(records, memory) == {"U0": Load(3 * GIB, 2), "U1": Load(3 * GIB, 1)}


def test_memory_book_reads_limits_files_of_claims_it_was_not_told_of(tmp_path):
    from driver.limits.limitsfile import write_limits
    from driver.plugin.container.edits import ClaimFiles

    files = ClaimFiles(tmp_path / "old")
    files.limits.parent.mkdir(parents=True)
    write_limits(files.limits, ClaimLimits((DeviceLimit(5 * GIB, 0, "U1"),), "/r"))
    book = MemoryBook(tmp_path)
    book.remember("new", ClaimLimits((DeviceLimit(GIB, 0, "U0"),), "/r"))
    dev = DeviceRecord(["r"], "node-a", "gpu-1", "s", [], type="vgpu", gpu_uuid="U1")
    records = [
        ClaimRecord("old", "ns", "o", "PrepareCompleted", [dev]),
        ClaimRecord("new", "ns", "n", "x", [dev]),
    ]
    assert book.memory(records) == {"old": {"U1": 5 * GIB}, "new": {"U0": GIB}}
    # Unprepared claims are forgotten.
    assert book.memory(records[:1]) == {"old": {"U1": 5 * GIB}}
    assert book.memory([]) == {}


def test_a_burst_of_notifications_runs_the_action_once():
    ran = threading.Event()
    coalescer = Coalescer(ran.set, window_s=0.2).start()
    try:
        for _ in range(50):
            coalescer.notify()
        assert ran.wait(5)
        time.sleep(0.4)
        assert coalescer.runs == 1
        coalescer.notify()  # a later change gives one more run
        deadline = time.monotonic() + 5
        while coalescer.runs < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert coalescer.runs == 2
    finally:
        coalescer.stop()


@pytest.mark.parametrize("placement", ["binpack", "spread"])
def test_a_failing_action_does_not_stop_the_coalescer(placement):
    calls = []

    def action():
        calls.append(placement)
        if len(calls) == 1:
            raise RuntimeError("boom")

    coalescer = Coalescer(action, window_s=0.01).start()
    try:
        coalescer.notify()
        deadline = time.monotonic() + 5
        while len(calls) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        coalescer.notify()
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) == 2
    finally:
        coalescer.stop()


def test_a_slice_with_one_or_no_shareable_device_is_kept_and_the_slices_after_it_ordered():
    # the shareable devices split over slices: one with a single soft GPU (nothing to order) comes first,
    # then one with the other three; each slice is returned, the later one reordered
    built, uuid = _slices({i: names.STRATEGY_SOFT for i in range(4)})
    devices = [d for s in built for d in s["spec"].get("devices") or []]
    soft = [d for d in devices if d["name"] in ("gpu-0", "gpu-1", "gpu-2", "gpu-3")]
    first = {**built[0], "metadata": {"name": "a"}, "spec": {**built[0]["spec"], "devices": soft[:1]}}
    second = {**built[0], "metadata": {"name": "b"}, "spec": {**built[0]["spec"], "devices": soft[1:]}}
    empty = {**built[0], "metadata": {"name": "c"}, "spec": {**built[0]["spec"], "devices": []}}
    loads = {uuid["gpu-3"]: Load(8 * GIB, 1)}
    out = order_devices([first, empty, second], loads, "binpack")
    assert [s["metadata"]["name"] for s in out] == ["a", "c", "b"]
    assert _names(out) == ["gpu-0", "gpu-3", "gpu-1", "gpu-2"]
