"""A GPU's health change is announced with a Node Event naming that GPU (gpu-<minor>) and its UUID, on a
node of several GPUs too: the GPU is found by its UUID, not as the first one whose UUID sorts before."""

from __future__ import annotations

import dataclasses
from typing import Any

from driver.devices.catalog import fake_gpu
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


def test_each_changed_gpu_is_named_in_its_event() -> None:
    # UUIDs chosen so that the second GPU's sorts after the first's: a lookup by order would name gpu-0
    gpus = [
        dataclasses.replace(fake_gpu("A100-80GB", 0, "n1"), uuid="GPU-aaaa", minor=0),
        dataclasses.replace(fake_gpu("A100-80GB", 1, "n1"), uuid="GPU-bbbb", minor=1),
    ]
    events = Events()
    health = NodeHealth(
        "n1", gpus, TaintPolicy(), events, NoMetrics(), lambda: None, lambda: False, lambda: {}
    )
    health.on_change([Change("GPU-bbbb", 1, False, CAUSE_LOST)])
    health.on_change([Change("GPU-aaaa", 0, False, CAUSE_LOST)])
    messages = [b["message"] for b in events.bodies]
    assert messages[0].startswith("gpu-1 (GPU-bbbb)") and messages[1].startswith("gpu-0 (GPU-aaaa)")
