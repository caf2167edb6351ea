"""The kubelet's health stream as docs/health.md states it: every report carries
`health_check_timeout_seconds` 90, and the node's stream sends the device list again every 30 s without a
change (three resends fit in the timeout, so a live plugin's devices never turn UNKNOWN)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from driver.plugin.health.policy import TaintPolicy
from driver.plugin.health.service import DeviceReport, HealthV1
from driver.plugin.health.wiring import NodeHealth

DOC = Path(__file__).resolve().parents[3] / "docs" / "health.md"


def _documented() -> tuple[int, int]:
    text = " ".join(DOC.read_text().split())
    m = re.search(
        r"`health_check_timeout_seconds` \((\d+): a list goes out on every change and every (\d+) s\)", text
    )
    assert m, "docs/health.md no longer states the health stream's timeout and resend period"
    return int(m[1]), int(m[2])


def _node_health() -> NodeHealth:
    return NodeHealth(
        "node-a", [], TaintPolicy(), None, SimpleNamespace(observe_health=lambda *a: None),
        lambda: None, lambda: False, lambda: {},
    )  # fmt: skip


def test_the_nodes_stream_resends_as_often_as_the_docs_say():
    _, resend_s = _documented()
    assert _node_health().broadcast.resend_s == resend_s


def test_each_report_carries_the_documented_timeout():
    timeout_s, _ = _documented()
    health = _node_health()
    health.broadcast.devices = lambda: [DeviceReport("node-a", "gpu-0", True)]
    calls = iter([True, False])
    context = SimpleNamespace(is_active=lambda: next(calls))
    (response,) = list(HealthV1(health.broadcast).NodeWatchResources(None, context))
    (device,) = response.devices
    assert device.health_check_timeout_seconds == timeout_s
    assert (device.device.pool_name, device.device.device_name) == ("node-a", "gpu-0")
