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
    # The GPUs listed out of UUID order: a lookup by `<=` or `>=` instead of `==` names another GPU
    listed = [("GPU-bbbb", 0), ("GPU-aaaa", 1), ("GPU-cccc", 2)]
    gpus = [dataclasses.replace(fake_gpu("A100-80GB", m, "n1"), uuid=u, minor=m) for u, m in listed]
    events = Events()
    health = NodeHealth(
        "n1", gpus, TaintPolicy(), events, NoMetrics(), lambda: None, lambda: False, lambda: {}
    )
    for uuid, minor in listed:
        health.on_change([Change(uuid, minor, False, CAUSE_LOST)])
    messages = [b["message"] for b in events.bodies]
    assert len(messages) == len(listed)
    for message, (uuid, minor) in zip(messages, listed, strict=True):
        assert message.startswith(f"gpu-{minor} ({uuid}) is unhealthy"), message
