"""The kubelet's health stream (driver/plugin/health/service.py) sends a change as soon as it happens, even
one published while the kubelet was still taking the previous message: it must not sit on the change until
the next periodic resend (30 s: a GPU that went bad would keep its pods' status healthy that long); and it
ends when the broadcast closes or the kubelet goes away."""

from __future__ import annotations

import queue
import threading

from driver.plugin.health.service import DeviceReport, HealthBroadcast

NEVER = 600.0  # a resend period no test waits for


def _consume(stream, out: queue.Queue) -> threading.Thread:
    def run():
        for item in stream:
            out.put(item)
        out.put(None)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_change_made_between_two_messages_is_sent_at_once():
    state = {"healthy": True, "calls": 0}
    building, go_on = threading.Event(), threading.Event()

    def devices():
        state["calls"] += 1
        if state["calls"] == 1:  # the first message is being built when the GPU goes bad
            building.set()
            go_on.wait(30)
        return [DeviceReport("p", "gpu-0", state["healthy"])]

    broadcast = HealthBroadcast(devices, resend_s=NEVER)
    out: queue.Queue = queue.Queue()
    _consume(broadcast.stream(lambda: True), out)
    assert building.wait(30)
    state["healthy"] = False
    broadcast.publish()
    go_on.set()
    assert out.get(timeout=30) == [DeviceReport("p", "gpu-0", False)]
    assert out.get(timeout=30) == [
        DeviceReport("p", "gpu-0", False)
    ]  # the change's own message, not NEVER later
    broadcast.close()
    assert out.get(timeout=30) is None


def test_a_change_while_the_stream_waits_is_sent_and_close_ends_it():
    state = {"healthy": True}
    broadcast = HealthBroadcast(lambda: [DeviceReport("p", "gpu-0", state["healthy"])], resend_s=NEVER)
    out: queue.Queue = queue.Queue()
    _consume(broadcast.stream(lambda: True), out)
    assert out.get(timeout=30) == [DeviceReport("p", "gpu-0", True)]
    state["healthy"] = False
    broadcast.publish()
    assert out.get(timeout=30) == [DeviceReport("p", "gpu-0", False)]
    broadcast.close()
    assert out.get(timeout=30) is None


def test_a_stream_whose_kubelet_went_away_ends():
    broadcast = HealthBroadcast(lambda: [], resend_s=NEVER)
    assert list(broadcast.stream(lambda: False)) == []
    broadcast.close()
    assert list(broadcast.stream(lambda: True)) == []  # closed: nothing more is sent
