"""Closing the claim status queue (the plugin's stop, driver/plugin/server.py): a report still queued when
the stop's grace period ran out is still sent, not dropped, and once nothing is left the queue's thread
ends, so a stopped plugin leaves no sender behind."""

from __future__ import annotations

import threading
import time

from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.status import StatusQueue


class GatedWriter:
    """Sends block until the test opens the gate, as a slow API server would."""

    def __init__(self):
        self.gate, self.started = threading.Event(), threading.Event()
        self.sent: list[str] = []

    def write(self, ref, entries):
        self.started.set()
        self.gate.wait(10)
        self.sent.append(ref.uid)
        return True

    def clear(self, ref):
        return self.write(ref, None)


def _alive(name: str) -> bool:
    return any(t.name == name and t.is_alive() for t in threading.enumerate())


def _until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_reports_still_queued_when_the_grace_period_runs_out_are_sent_after_close():
    writer = GatedWriter()
    queue = StatusQueue(writer, name="status-close-late")
    queue.write(ClaimRef("ns", "a", "uid-a"), [])
    assert writer.started.wait(5)
    queue.write(ClaimRef("ns", "b", "uid-b"), [])  # behind a's send, which the API server holds
    queue.close(0.05)  # the grace period runs out with both still to go
    assert writer.sent == []
    writer.gate.set()
    assert _until(lambda: writer.sent == ["uid-a", "uid-b"]), writer.sent
    assert _until(lambda: not _alive("status-close-late"))


def test_close_ends_the_queues_thread():
    writer = GatedWriter()
    writer.gate.set()
    queue = StatusQueue(writer, name="status-close-idle")
    queue.write(ClaimRef("ns", "a", "uid-a"), [])
    assert _alive("status-close-idle")
    queue.close(5.0)
    assert writer.sent == ["uid-a"]
    assert _until(lambda: not _alive("status-close-idle"))
