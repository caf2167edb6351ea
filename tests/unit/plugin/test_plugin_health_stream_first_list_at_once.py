"""A kubelet that opens the health stream (NodeWatchResources) gets the device list at once, however many
changes were published before it came (none, one, several): the stream waits for the next change (or the
resend interval) only after it has sent the list it opened with. A stream that waited first would leave
the kubelet without any health for up to the resend interval (30 s) after every plugin or kubelet restart."""

from __future__ import annotations

import threading

import pytest

from driver.plugin.health.service import DeviceReport, HealthBroadcast


class NoWaitBeforeTheFirstList(threading.Condition):
    """The broadcast's condition: a wait is recorded, and fails the test while nothing was sent yet."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def wait(self, timeout: float | None = None) -> bool:
        assert self.sent > 0, "the stream waited before sending its first list"
        return super().wait(0)


@pytest.mark.parametrize("published", [0, 1, 2, 5])
def test_the_first_list_is_sent_without_waiting(published: int) -> None:
    reports = [DeviceReport("node-a", "gpu-0", True)]
    broadcast = HealthBroadcast(lambda: list(reports), resend_s=3600.0)
    for _ in range(published):
        broadcast.publish()
    cond = NoWaitBeforeTheFirstList()
    broadcast.cond = cond
    stream = broadcast.stream(lambda: True)
    assert next(stream) == reports
    cond.sent += 1
    broadcast.publish()  # a change after the first list: sent next, again without a wait
    reports.append(DeviceReport("node-a", "gpu-1", False, "XID 79"))
    assert next(stream) == reports
    broadcast.close()
    assert list(stream) == []
