"""The kubelet's health list (NodeWatchResources) gives each device its own GPU's health. A device whose
GPU is not among the node's GPUs (a device of a slice the API server still holds from before a GPU went
away, or one published without its GPU's UUID) takes no other GPU's cause, the first GPU's or the second's,
whichever is unhealthy: it is reported without a cause."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from driver.devices.catalog import fake_gpu
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.health.monitor import STATE_FILE, STATE_VERSION
from driver.plugin.health.policy import TaintPolicy, describe
from driver.plugin.health.wiring import NodeHealth


class NoCluster:
    def create_event(self, namespace: str, body: dict) -> None:
        pass


class NoMetrics:
    def observe_health(self, *args: object) -> None:
        pass


def test_a_device_of_no_gpu_of_the_node_is_reported_without_a_cause(tmp_path: Path) -> None:
    gpus = [dataclasses.replace(fake_gpu("A100-80GB", m, "n1"), uuid=f"GPU-{m}", minor=m) for m in (0, 1)]
    devices = {
        "gpu-0": NodeDevice("gpu-0", "gpu", "GPU-0", 0),
        "gpu-1": NodeDevice("gpu-1", "gpu", "GPU-1", 1),
        "gpu-2": NodeDevice("gpu-2", "gpu", "GPU-gone", 2),
        "gpu-3-slot-0": NodeDevice("gpu-3-slot-0", "slot", "", 3),
    }
    unhealthy = {"GPU-0": {"index": 0, "cause": "XID 79"}, "GPU-1": {"index": 1, "cause": "XID 48"}}
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": STATE_VERSION, "unhealthy": unhealthy}))
    health = NodeHealth(
        "n1", gpus, TaintPolicy(), NoCluster(), NoMetrics(), lambda: None, lambda: False, lambda: devices
    )
    health.start_monitor(tmp_path, recovery_s=3600.0, ignore_xids="", interval_s=60.0)
    try:
        assert health.unhealthy() == {0: "XID 79", 1: "XID 48"}
        got = {r.device: (r.healthy, r.message) for r in health.reports()}
    finally:
        health.stop()
    assert got == {
        "gpu-0": (False, describe("XID 79")),
        "gpu-1": (False, describe("XID 48")),
        "gpu-2": (True, ""),
        "gpu-3-slot-0": (True, ""),
    }
