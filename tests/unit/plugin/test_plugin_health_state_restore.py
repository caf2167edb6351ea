"""A restarted plugin restores each GPU's health cause with the time it was last seen bad (the recovery
window runs from then, not from the restart), and a lastBad that is not a number counts from now (a
survivor of generated mutants in driver/plugin/health/monitor.py)."""

from __future__ import annotations

import json

import pytest

from driver.plugin.health.monitor import STATE_VERSION, HealthMonitor


@pytest.mark.parametrize(("last_bad", "restored"), [(1000.0, 1000.0), (1000, 1000.0), ("yesterday", 5000.0),
                                                    (None, 5000.0)])
def test_a_gpu_is_restored_unhealthy_since_its_saved_last_bad_time(tmp_path, last_bad, restored):
    state = tmp_path / "health.json"
    state.write_text(json.dumps({"version": STATE_VERSION, "unhealthy": {
        "GPU-0": {"index": 0, "cause": "XID 79", "lastBad": last_bad}}}))
    monitor = HealthMonitor([("GPU-0", 0), ("GPU-1", 1)], lambda changes: None, state, clock=lambda: 5000.0)
    assert len(monitor._load()) == 1  # one change: GPU-0 unhealthy
    assert monitor.unhealthy() == {0: "XID 79"}
    assert monitor.book.gpus["GPU-0"].last_bad == restored
