"""StatusQueue.flush (driver/plugin/claims/status.py) gives up at its deadline and not later: the plugin's
stop flushes the queued claim status reports within the stop's grace period (docs/plugin.md), and a flush
that overran it would delay the kubelet's view of the plugin going away. Read on a clock the test moves, so
the check holds on a loaded machine."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from driver.plugin.claims import status
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.status import StatusQueue


class Clock:
    """time.monotonic for the status module: every reading moves it on by 10 ms."""

    def __init__(self):
        self.now = 1000.0
        self.lock = threading.Lock()

    def monotonic(self):
        with self.lock:
            self.now += 0.01
            return self.now


class StuckWriter:
    def __init__(self):
        self.gate, self.started = threading.Event(), threading.Event()

    def write(self, ref, entries):
        self.started.set()
        self.gate.wait(10)
        return True

    clear = write


def test_flush_returns_false_as_soon_as_its_deadline_has_passed(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(status, "time", SimpleNamespace(monotonic=clock.monotonic))
    writer = StuckWriter()
    queue = StatusQueue(writer)
    queue.write(ClaimRef("ns", "a", "uid-a"), [])
    assert writer.started.wait(5)
    began = clock.monotonic()
    assert queue.flush(0.1) is False
    assert clock.now - began < 0.5  # a few readings past the deadline, not a second more
    before = clock.now
    assert queue.flush(0) is False  # no time at all: one look
    assert clock.now - before < 0.1
    writer.gate.set()
    assert queue.flush(5)
    queue.close(2.0)
