"""With NVML events, the health monitor's turn is paced by the event wait itself: each turn waits up to
--health-interval for an XID, and nvmlEventSetWait takes its timeout in milliseconds, so a 5 s interval is
a 5,000 ms wait (a wait of 0 would turn the monitor into a loop probing every GPU without pause)."""

from __future__ import annotations

from driver.gpu import events
from driver.plugin.health.monitor import HealthMonitor


class RecordingWaits:
    """The event set: records each wait's timeout and times out (no XID)."""

    def __init__(self):
        self.timeouts: list[int] = []

    def wait(self, timeout_ms):
        self.timeouts.append(timeout_ms)
        return None


def test_each_turn_waits_the_health_interval_in_milliseconds(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "probe", lambda uuid: events.Signals())
    for interval_s, want_ms in ((5.0, 5000), (0.25, 250)):
        monitor = HealthMonitor(
            [("GPU-0", 0)], lambda changes: None, tmp_path / "health.json", interval_s=interval_s
        )
        monitor._events = RecordingWaits()
        assert monitor.turn() == []
        assert monitor._events.timeouts == [want_ms]
