"""An MPS control daemon that stops answering is restarted after MISSES_BEFORE_RESTART checks in a row,
not before (one missed check is a busy daemon, not a hung one) and not later (a hung daemon holds every
client's cuInit)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from driver.plugin.mps import daemon
from driver.plugin.mps.daemon import BACKOFF_MIN_S, MISSES_BEFORE_RESTART, DaemonState, MpsDaemons


def test_a_daemon_is_restarted_at_its_third_unanswered_check(tmp_path, monkeypatch):
    # nvidia-cuda-mps-control as a hung daemon's clients see it: every command fails.
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text("#!/bin/sh\ncat >/dev/null\nexit 1\n")
    control.chmod(0o755)
    monkeypatch.setattr(daemon, "STOP_TIMEOUT_S", 0.2)
    daemons = MpsDaemons(control, tmp_path / "mps")
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d = daemons.daemons["GPU-a"] = DaemonState("GPU-a", "gpu-0", tmp_path / "mps" / "gpu-0", proc=hung,
                                                   healthy=True)
        d.root.mkdir(parents=True)
        assert MISSES_BEFORE_RESTART == 3
        for seen in range(1, MISSES_BEFORE_RESTART):
            daemons.ensure([("GPU-a", "gpu-0")])
            assert d.misses == seen and d.restarts == 0 and hung.poll() is None
        before = time.monotonic()
        daemons.ensure([("GPU-a", "gpu-0")])
        assert d.restarts == 1 and hung.poll() is not None  # stopped, to start again after the back-off
        # not at once: the next start waits for the back-off, which starts at its minimum (1 s)
        assert d.backoff_s == BACKOFF_MIN_S and d.next_start >= before + BACKOFF_MIN_S >= before + 1
        assert daemons.health()["gpu-0"]["error"] == "did not answer 3 checks in a row"
    finally:
        if hung.poll() is None:
            hung.kill()
        hung.wait()


def test_the_back_off_docs_enforcement_md_gives_is_the_daemons():
    # "back-off (1 s, doubling to 5 min, reset after 10 min of running": what an operator reads is what runs
    text = " ".join((Path(__file__).resolve().parents[3] / "docs" / "enforcement.md").read_text().split())
    m = re.search(r"back-off \((\d+) s, doubling to (\d+) min, reset after (\d+) min of running", text)
    assert m, "docs/enforcement.md no longer states the MPS daemon's back-off"
    documented = (int(m[1]), int(m[2]) * 60, int(m[3]) * 60)
    assert documented == (daemon.BACKOFF_MIN_S, daemon.BACKOFF_MAX_S, daemon.STABLE_S)
