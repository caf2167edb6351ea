"""An MPS control daemon is restarted only after MISSES_BEFORE_RESTART unanswered checks *in a row*: a check
it answers in between starts the count again and clears what its health said, so a daemon that is only slow at
times is never restarted under its clients; and a control command that cannot run at all (the binary gone
after an upgrade of the driver root) counts as a miss, not as a crash of the plugin."""

from __future__ import annotations

import subprocess
import sys

from driver.plugin.mps import daemon
from driver.plugin.mps.daemon import MISSES_BEFORE_RESTART, DaemonState, MpsDaemons

GPU = [("GPU-a", "gpu-0")]


def test_an_answer_between_misses_starts_the_count_again(tmp_path, monkeypatch):
    answer = tmp_path / "answer"  # present: the control command succeeds
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text(f'#!/bin/sh\ncat >/dev/null\n[ -e "{answer}" ]\n')
    control.chmod(0o755)
    monkeypatch.setattr(daemon, "STOP_TIMEOUT_S", 0.2)
    daemons = MpsDaemons(control, tmp_path / "mps")
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d = daemons.daemons["GPU-a"] = DaemonState(
            "GPU-a",
            "gpu-0",
            tmp_path / "mps" / "gpu-0",
            proc=slow,
            error="the control daemon did not answer in time",
        )
        d.root.mkdir(parents=True)
        for _ in range(3):
            for _ in range(MISSES_BEFORE_RESTART - 1):
                daemons.ensure(GPU)  # missed
            answer.touch()
            daemons.ensure(GPU)  # answered: the count starts again
            answer.unlink()
            assert (d.misses, d.restarts, slow.poll()) == (0, 0, None)
            assert daemons.health()["gpu-0"] == {
                "uuid": "GPU-a", "healthy": True, "restarts": 0, "error": "", "pid": slow.pid,
            }  # fmt: skip
    finally:
        slow.kill()
        slow.wait()


def test_a_control_binary_that_is_gone_counts_as_a_miss(tmp_path, monkeypatch):
    monkeypatch.setattr(daemon, "STOP_TIMEOUT_S", 0.2)
    daemons = MpsDaemons(tmp_path / "removed-by-an-upgrade", tmp_path / "mps")
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d = daemons.daemons["GPU-a"] = DaemonState(
            "GPU-a", "gpu-0", tmp_path / "mps" / "gpu-0", proc=running, healthy=True
        )
        d.root.mkdir(parents=True)
        daemons.ensure(GPU)
        assert d.misses == 1 and running.poll() is None
    finally:
        running.kill()
        running.wait()
