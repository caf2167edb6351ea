"""An MPS control daemon that cannot start is retried after a back-off that starts at BACKOFF_MIN_S and
doubles with each failed start up to BACKOFF_MAX_S (docs/enforcement.md), whether the control binary cannot
run at all (the GPU's health names the binary and why) or its daemon runs but never answers (stopped, never
two)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from driver.plugin.mps import daemon
from driver.plugin.mps.daemon import BACKOFF_MAX_S, BACKOFF_MIN_S, MpsDaemons

GPU = [("GPU-a", "gpu-0")]


class Clock:
    """time.monotonic for the daemon module, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_a_control_binary_that_cannot_run_is_retried_after_a_doubling_back_off(tmp_path, monkeypatch):
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text("#!/bin/sh\nexit 0\n")
    control.chmod(0o644)  # not executable: exec fails (EACCES), for root too
    clock = Clock()
    monkeypatch.setattr(daemon, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=time.sleep))
    daemons = MpsDaemons(control, tmp_path / "mps")
    daemons.ensure(GPU)
    d = daemons.daemons["GPU-a"]
    health = daemons.health()["gpu-0"]
    assert health["healthy"] is False and health["pid"] is None
    assert health["error"] == f"cannot run {control}: Permission denied"
    assert daemons.pipe_dir("GPU-a") is None
    expected = BACKOFF_MIN_S
    seen = []
    for _ in range(12):
        assert d.backoff_s == expected and d.next_start == clock.now + expected
        seen.append(d.backoff_s)
        clock.now += expected - 0.001  # not yet: no new try before the back-off has passed
        daemons.ensure(GPU)
        assert d.backoff_s == expected
        clock.now += 0.001
        daemons.ensure(GPU)
        expected = min(expected * 2, BACKOFF_MAX_S)
    assert seen == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]


def test_a_daemon_that_never_answers_is_stopped_and_retried_after_the_back_off(tmp_path, monkeypatch):
    # `-f` runs a daemon that never makes its control socket; every command fails
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text('#!/bin/sh\n[ "$1" = -f ] && exec sleep 60\ncat >/dev/null\nexit 1\n')
    control.chmod(0o755)
    monkeypatch.setattr(daemon, "READY_TIMEOUT_S", 0.3)
    monkeypatch.setattr(daemon, "STOP_TIMEOUT_S", 0.2)
    daemons = MpsDaemons(control, tmp_path / "mps")
    before = time.monotonic()
    daemons.ensure(GPU)
    d = daemons.daemons["GPU-a"]
    assert d.proc is None  # stopped: a daemon that did not come up goes before the next try
    health = daemons.health()["gpu-0"]
    assert health["healthy"] is False and health["error"] == "the control daemon did not answer in time"
    assert d.backoff_s == BACKOFF_MIN_S
    assert before + BACKOFF_MIN_S <= d.next_start <= time.monotonic() + BACKOFF_MIN_S
    daemons.ensure(GPU)  # within the back-off: no new start
    assert d.proc is None and d.backoff_s == BACKOFF_MIN_S
    time.sleep(max(0.0, d.next_start - time.monotonic()) + 0.01)
    before = time.monotonic()
    daemons.ensure(GPU)
    assert d.proc is None and d.backoff_s == 2 * BACKOFF_MIN_S
    assert before + 2 * BACKOFF_MIN_S <= d.next_start <= time.monotonic() + 2 * BACKOFF_MIN_S
    daemons.stop()
