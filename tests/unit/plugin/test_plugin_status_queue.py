"""StatusQueue (driver/plugin/claims/status.py): claim status reports leave from a thread of their own, so
a prepare does not wait on the API server; per claim the last report wins and order is kept."""

from __future__ import annotations

import threading

from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.status import KubeletCalls, StatusQueue


class SlowWriter:
    """Records what was sent; blocks each send until released, as a slow API server would."""

    def __init__(self):
        self.sent: list[tuple[str, str, object]] = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def write(self, ref, entries):
        self.started.set()
        self.gate.wait(10)
        self.sent.append(("write", ref.uid, entries))
        return True

    def clear(self, ref, claim=None):
        self.started.set()
        self.gate.wait(10)
        self.sent.append(("clear", ref.uid, None))
        return True


def test_a_report_does_not_block_the_caller_and_the_last_one_per_claim_wins():
    writer = SlowWriter()
    queue = StatusQueue(writer)
    a, b = ClaimRef("ns", "a", "uid-a"), ClaimRef("ns", "b", "uid-b")
    queue.write(a, [{"n": 1}])  # taken by the thread at once, held at the gate
    assert writer.started.wait(5)
    queue.write(b, [{"n": 2}])
    queue.write(a, [{"n": 3}])
    queue.clear(b)  # b's write was still queued: the clear replaces it (and goes after a's newer report)
    assert writer.sent == []  # nothing returned to us waited for the API server
    writer.gate.set()
    assert queue.flush(5)
    assert writer.sent == [
        ("write", "uid-a", [{"n": 1}]),
        ("write", "uid-a", [{"n": 3}]),
        ("clear", "uid-b", None),
    ]
    queue.close(2.0)


def test_a_failing_report_is_logged_and_the_queue_goes_on(caplog):
    class Failing(SlowWriter):
        def write(self, ref, entries):
            raise RuntimeError("API server down")

    writer = Failing()
    writer.gate.set()
    queue = StatusQueue(writer)
    queue.write(ClaimRef("ns", "a", "uid-a"), [])
    queue.clear(ClaimRef("ns", "b", "uid-b"))
    assert queue.flush(5)
    assert writer.sent == [("clear", "uid-b", None)]
    (failed,) = [r for r in caplog.records if r.getMessage() == "claim-status.failed"]
    assert failed.fields["uid"] == "uid-a" and "API server down" in failed.fields["error"]
    queue.close(2.0)


def test_flush_gives_up_after_its_timeout():
    writer = SlowWriter()
    queue = StatusQueue(writer)
    queue.write(ClaimRef("ns", "a", "uid-a"), [])
    assert writer.started.wait(5)
    assert queue.flush(0.05) is False
    writer.gate.set()
    assert queue.flush(5)
    queue.close(2.0)


def test_a_report_waits_for_the_kubelets_calls_in_flight_and_goes_once_they_end():
    """A burst of prepares and the reports share one interpreter: a report queued while a call is in
    flight is sent when the last call ends, not during it (docs/performance.md, fourth pass)."""
    writer = SlowWriter()
    writer.gate.set()
    calls = KubeletCalls()
    queue = StatusQueue(writer, calls=calls, yield_s=30)
    first, second = calls.serving(), calls.serving()
    first.__enter__()
    second.__enter__()
    queue.write(ClaimRef("ns", "a", "uid-a"), [{"n": 1}])
    assert not writer.started.wait(0.3)  # two calls in flight: the report waits
    first.__exit__(None, None, None)
    assert not writer.started.wait(0.3)  # one still in flight
    second.__exit__(None, None, None)
    assert queue.flush(5)  # the last call ended: sent long before yield_s
    assert writer.sent == [("write", "uid-a", [{"n": 1}])]
    queue.close(2.0)


def test_under_a_steady_stream_of_calls_a_report_waits_no_longer_than_yield_s():
    writer = SlowWriter()
    writer.gate.set()
    calls = KubeletCalls()
    queue = StatusQueue(writer, calls=calls, yield_s=0.2)
    with calls.serving():  # a call that outlasts the report's patience
        queue.write(ClaimRef("ns", "a", "uid-a"), [])
        assert writer.started.wait(5)  # sent while the call is still in flight
        assert calls.wait_idle(0) is False
    assert calls.wait_idle(0) is True
    assert writer.sent == [("write", "uid-a", [])]
    queue.close(2.0)


def test_the_servicer_counts_its_calls_in_flight_while_the_preparer_runs():
    from driver.plugin.service import DraV1

    seen: list[bool] = []

    class Preparer:
        def prepare(self, refs):
            seen.append(calls.wait_idle(0))
            return {}

        def unprepare(self, refs):
            seen.append(calls.wait_idle(0))
            return {}

    calls = KubeletCalls()
    service = DraV1(Preparer(), None, calls)
    service.NodePrepareResources(service.pb.NodePrepareResourcesRequest(), None)
    service.NodeUnprepareResources(service.pb.NodeUnprepareResourcesRequest(), None)
    assert seen == [False, False]  # busy inside each call
    assert calls.wait_idle(0) is True  # and idle after
