"""The health monitor's stop() lets its loop leave NVML's event wait before it closes the event set
(driver/plugin/health/monitor.py): nvmlEventSetFree while another thread is inside nvmlEventSetWait on the
same set frees what that thread is using. So stop() waits for the loop, and closes the set after it."""

from __future__ import annotations

import threading

from driver.gpu import events
from driver.plugin.health.monitor import HealthMonitor


class BlockingEventSet:
    """NVML's event set: a wait blocks until the test releases it; records a close made during a wait."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.release = threading.Event()
        self.closed = threading.Event()
        self.in_wait = False
        self.closed_during_wait = False

    def register(self, uuid: str) -> str:
        return ""

    def wait(self, timeout_ms: int) -> None:
        self.in_wait = True
        self.waiting.set()
        self.release.wait(30)
        self.in_wait = False
        return None

    def close(self) -> None:
        self.closed_during_wait = self.in_wait
        self.closed.set()


def test_stop_closes_the_event_set_only_after_the_loop_left_its_wait(tmp_path, monkeypatch) -> None:
    event_set = BlockingEventSet()
    monkeypatch.setattr(events, "EventSet", lambda: event_set)
    monkeypatch.setattr(events, "probe", lambda uuid: events.Signals())
    monitor = HealthMonitor([("GPU-0", 0)], lambda changes: None, tmp_path / "health.json", interval_s=5.0)
    monitor.start()
    assert event_set.waiting.wait(10), "the loop never waited on the event set"
    stopper = threading.Thread(target=monitor.stop)
    stopper.start()
    # While the loop is inside its wait, stop() must not close the set: give a stop() that would a moment
    # to do it (under load it may not, and the test then passes for any stop()), then end the wait.
    event_set.closed.wait(0.5)
    event_set.release.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert event_set.closed.is_set(), "stop() never closed the event set"
    assert not event_set.closed_during_wait, "the event set was closed while the loop waited on it"
    assert not any(t.name == "gpu-health" and t.is_alive() for t in threading.enumerate())
