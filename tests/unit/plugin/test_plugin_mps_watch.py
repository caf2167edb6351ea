"""The MPS daemons' watcher (driver/plugin/mps/daemon.py, watch): it passes every interval, outlives a pass
that fails (the failure is logged, the next pass runs) and ends when told to (survivors of generated
mutants)."""

from __future__ import annotations

import logging
import threading

from driver.plugin.mps.daemon import watch


class FlakyDaemons:
    """Stands in for MpsDaemons: the first ensure() fails as a broken nvidia-cuda-mps-control start would."""

    def __init__(self) -> None:
        self.passes: list[list[tuple[str, str]]] = []
        self.third = threading.Event()

    def ensure(self, gpus):
        self.passes.append(list(gpus))
        if len(self.passes) == 1:
            raise OSError("mps-control: no such file")
        if len(self.passes) >= 3:
            self.third.set()


def test_the_watcher_outlives_a_failing_pass_and_stops_when_told(caplog):
    daemons, stop = FlakyDaemons(), threading.Event()
    with caplog.at_level(logging.ERROR):
        t = watch(daemons, lambda: [("GPU-a", "0")], stop, interval_s=0.01)
        assert daemons.third.wait(30), f"passes after a failure: {daemons.passes}"
        stop.set()
        t.join(30)
    assert not t.is_alive()
    assert daemons.passes[:3] == [[("GPU-a", "0")]] * 3
    assert "mps.watch-failed" in caplog.text and "OSError: mps-control: no such file" in caplog.text
    n = len(daemons.passes)
    threading.Event().wait(0.1)
    assert len(daemons.passes) == n  # stopped: no pass after

