"""The health monitor when NVML's event wait fails (nvmlEventSetWait answering an error other than a lost
GPU): every GPU is suspect, as NVIDIA's own device plugin treats it, so each is marked with the event-error
cause; and the failure is logged when it starts and each time its error changes, not at every turn (one
turn a second would flood the plugin's log with one line a second for as long as the driver fails)."""

from __future__ import annotations

import logging

from driver.gpu import events
from driver.plugin.health.monitor import HealthMonitor
from driver.plugin.health.policy import CAUSE_EVENT_ERROR


class ScriptedWaits:
    """The event set: each wait answers the next item (an exception is raised, None is a timeout)."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def wait(self, timeout_ms):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_failing_wait_marks_every_gpu_and_is_logged_once_per_error(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(events, "probe", lambda uuid: events.Signals())
    monitor = HealthMonitor([("GPU-0", 0), ("GPU-1", 1)], lambda changes: None, tmp_path / "health.json",
                            interval_s=0)  # fmt: skip
    assert monitor._load() == []  # what start() does first: the state file, whose removal is the reset
    monitor._events = ScriptedWaits(
        events.WaitFailed("Unknown Error"),
        events.WaitFailed("Unknown Error"),
        events.WaitFailed("Unknown Error"),
        events.WaitFailed("Not Supported"),
        None,  # a wait that worked: the next failure is news again
        events.WaitFailed("Not Supported"),
    )
    with caplog.at_level(logging.ERROR):
        first = monitor.turn()
        assert sorted((c.index, c.healthy, c.cause) for c in first) == [
            (0, False, CAUSE_EVENT_ERROR),
            (1, False, CAUSE_EVENT_ERROR),
        ]
        assert monitor.unhealthy() == {0: CAUSE_EVENT_ERROR, 1: CAUSE_EVENT_ERROR}
        for _ in range(5):
            monitor.turn()
    logged = [r.fields["error"] for r in caplog.records if r.getMessage() == "health.wait-failed"]
    assert logged == ["Unknown Error", "Not Supported", "Not Supported"]
