"""--placement's wiring in the plugin (driver/plugin/placement_wiring.py): `index` needs none (the order never
depends on the load), `binpack` and `spread` each get one that asks for a re-publish after a prepare that
changes the published order of the shareable devices, and not after one that leaves it as it is."""

from __future__ import annotations

import threading

import pytest

from driver import names
from driver.devices import Settings
from driver.devices.catalog import fake_gpu
from driver.devices.slices import build_slices
from driver.limits.env import ClaimLimits, DeviceLimit
from driver.plugin.placement_wiring import PlacementWiring
from driver.plugin.state.checkpoint import ClaimRecord, DeviceRecord

GIB = 1 << 30


def test_index_needs_no_wiring(tmp_path):
    assert PlacementWiring.for_flag("index", tmp_path, dict, lambda: None, 0.01) is None


@pytest.mark.parametrize(
    ("placement", "loaded", "reorders"),
    [("binpack", 1, True), ("binpack", 0, False), ("spread", 0, True), ("spread", 1, False)],
)
def test_a_prepare_that_changes_the_order_asks_for_a_republish(tmp_path, placement, loaded, reorders):
    gpus = [fake_gpu("A100-80GB", i, "node-a") for i in range(2)]
    slices = build_slices(
        "node-a", gpus, {0: names.STRATEGY_SOFT, 1: names.STRATEGY_SOFT}, Settings(), "1.36"
    )
    state: dict[str, ClaimRecord] = {}
    woken = threading.Event()
    wiring = PlacementWiring.for_flag(placement, tmp_path, lambda: state, woken.set, 0.01)
    assert wiring is not None and wiring.placement == placement
    try:
        wiring.published(slices)  # as built: GPU index order
        uuid = gpus[loaded].uuid
        dev = DeviceRecord(["r"], "node-a", f"gpu-{loaded}", "s", [], type=names.TYPE_VGPU, gpu_uuid=uuid)
        record = ClaimRecord("c1", "ns", "c1", "PrepareCompleted", [dev])
        state["c1"] = record
        reported = []
        hook = wiring.after_prepare(lambda plan, rec, limits: reported.append(rec.uid))
        hook(None, record, ClaimLimits((DeviceLimit(8 * GIB, 0, uuid),), "/r"))
        assert reported == ["c1"]
        # binpack puts the loaded GPU first, spread last: a change from index order only where that moves it
        assert woken.wait(10 if reorders else 0.5) is reorders
    finally:
        wiring.stop()
