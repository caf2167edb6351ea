"""A GPU's health change is announced with a Node Event naming that GPU (gpu-<minor>) and its UUID, on a
node of several GPUs too: the GPU is found by its UUID, not as the first one whose UUID sorts before. A
plugin restarted with a GPU its health file remembers unhealthy announces it the same way: the remembered
change carries the UUID read back from the file, an equal string but not the plugin's own object, so the
GPU must be found by value (`==`), not by identity (`is`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from driver.devices.catalog import fake_gpu
from driver.plugin.health.monitor import STATE_FILE, STATE_VERSION
from driver.plugin.health.policy import CAUSE_LOST, Change, TaintPolicy
from driver.plugin.health.wiring import NodeHealth


class Events:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.bodies.append(body)


class NoMetrics:
    def observe_health(self, *args: object) -> None:
        pass


def node_health(gpus: list, events: Events) -> NodeHealth:
    return NodeHealth("n1", gpus, TaintPolicy(), events, NoMetrics(), lambda: None, lambda: False, lambda: {})


def test_each_changed_gpu_is_named_in_its_event() -> None:
    # The GPUs listed out of UUID order: a lookup by `<=` or `>=` instead of `==` names another GPU
    listed = [("GPU-bbbb", 0), ("GPU-aaaa", 1), ("GPU-cccc", 2)]
    gpus = [dataclasses.replace(fake_gpu("A100-80GB", m, "n1"), uuid=u, minor=m) for u, m in listed]
    events = Events()
    health = node_health(gpus, events)
    for uuid, minor in listed:
        health.on_change([Change(uuid, minor, False, CAUSE_LOST)])
    messages = [b["message"] for b in events.bodies]
    assert len(messages) == len(listed)
    for message, (uuid, minor) in zip(messages, listed, strict=True):
        assert message.startswith(f"gpu-{minor} ({uuid}) is unhealthy"), message


def test_a_gpu_remembered_unhealthy_is_named_in_the_restart_event(tmp_path: Path) -> None:
    # UUIDs built at run time, as the plugin's GPU list is (from NVML), not shared literals
    uuids = ["-".join(("GPU", str(n) * 8)) for n in (3, 7)]
    gpus = [dataclasses.replace(fake_gpu("A100-80GB", m, "n1"), uuid=u, minor=m) for m, u in enumerate(uuids)]
    (tmp_path / STATE_FILE).write_text(
        json.dumps(
            {
                "version": STATE_VERSION,
                "unhealthy": {uuids[1]: {"index": 1, "cause": "XID 79", "lastBad": None}},
            }
        )
    )
    events = Events()
    health = node_health(gpus, events)
    # a long interval: the restored change is announced by start() itself, before the first turn
    health.start_monitor(tmp_path, recovery_s=3600.0, ignore_xids="", interval_s=60.0)
    try:
        assert health.unhealthy() == {1: "XID 79"}
        messages = [b["message"] for b in events.bodies]
        assert len(messages) == 1, messages
        assert messages[0].startswith(f"gpu-1 ({uuids[1]}) is unhealthy"), messages[0]
    finally:
        health.stop()
