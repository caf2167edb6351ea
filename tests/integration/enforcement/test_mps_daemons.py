"""driver/plugin/mps/daemon.py against control binaries that misbehave: what prepare asks (`pipe_dir`) never
waits on a daemon, a daemon is the plugin's child (one per GPU, stopped before another starts), and a
daemon left by a crashed plugin is stopped through the plugin's own record."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from driver.plugin.mps import daemon as daemon_module
from driver.plugin.mps.daemon import RECORD_FILE, MpsDaemons, start_time


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setattr(daemon_module, "READY_TIMEOUT_S", 3.0)
    monkeypatch.setattr(daemon_module, "STOP_TIMEOUT_S", 1.0)
    monkeypatch.setattr(daemon_module, "COMMAND_TIMEOUT_S", 1.0)


def _control(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "nvidia-cuda-mps-control"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_daemon_that_never_comes_up_does_not_hold_prepare(tmp_path: Path):
    """`-f` that never listens: the start waits for it (up to its deadline) without the lock prepare needs,
    so the pipe directory of another GPU is answered at once."""
    # As a daemon (-f) it sleeps without listening; as a client it finds no daemon.
    daemons = MpsDaemons(_control(tmp_path, '[ "$1" = -f ] && exec sleep 600; exit 1'), tmp_path / "mps")
    daemons.ensure([("GPU-a", "gpu-0")])  # fails: no answer; backs off
    assert daemons.pipe_dir("GPU-a") is None
    daemons.daemons["GPU-a"].next_start = 0.0
    thread = threading.Thread(target=daemons.ensure, args=([("GPU-a", "gpu-0"), ("GPU-b", "gpu-1")],))
    thread.start()
    try:
        time.sleep(0.5)  # inside the start of GPU-a's daemon, waiting for it to answer
        started = time.monotonic()
        assert daemons.pipe_dir("GPU-b") is None and daemons.health() is not None
        assert time.monotonic() - started < 0.5
    finally:
        thread.join(60)
        daemons.stop()


def test_a_daemon_that_exits_is_replaced_by_one_after_the_back_off(tmp_path: Path):
    log = tmp_path / "starts"
    daemons = MpsDaemons(_control(tmp_path, f'echo $$ >> {log}; exit 3'), tmp_path / "mps")
    daemons.ensure([("GPU-a", "gpu-0")])
    daemons.ensure([("GPU-a", "gpu-0")])  # within the back-off: no second start
    assert len(log.read_text().split()) == 1
    d = daemons.daemons["GPU-a"]
    assert d.proc is None and not d.healthy and d.backoff_s >= 1


def test_an_orphan_of_a_crashed_plugin_is_stopped_before_ours_starts(tmp_path: Path):
    orphan = subprocess.Popen(["sleep", "600"])
    try:
        root = tmp_path / "mps" / "gpu-0"
        root.mkdir(parents=True)
        (root / RECORD_FILE).write_text(f"{orphan.pid} {start_time(orphan.pid)}\n")
        # A record whose start time does not match (a reused pid) is never signalled.
        bystander = subprocess.Popen(["sleep", "600"])
        daemons = MpsDaemons(_control(tmp_path, "exit 0"), tmp_path / "mps")
        daemons.ensure([("GPU-a", "gpu-0")])
        assert orphan.wait(10) is not None
        (root / RECORD_FILE).write_text(f"{bystander.pid} 1\n")
        daemons.daemons["GPU-a"].next_start = 0.0
        daemons.ensure([("GPU-a", "gpu-0")])
        assert bystander.poll() is None
        bystander.kill()
        bystander.wait()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
    assert not os.path.exists(f"/proc/{orphan.pid}/status") or orphan.returncode is not None


def test_a_daemon_that_hangs_is_replaced_after_three_checks(tmp_path: Path):
    """The fake control daemon, stopped (SIGSTOP) once it runs: it keeps its pid but answers nothing. The
    third unanswered check stops it (SIGKILL reaches a stopped process) and the next pass after the back-off
    starts one new daemon."""
    control = Path(__file__).resolve().parents[3] / "native/build/fakes/nvidia-cuda-mps-control"
    pipe_base = Path(tempfile.mkdtemp(prefix="carve-hang-"))
    daemons = MpsDaemons(control, pipe_base / "mps")
    try:
        daemons.ensure([("GPU-a", "gpu-0")])
        first = daemons.daemons["GPU-a"].proc
        assert first is not None and daemons.pipe_dir("GPU-a") is not None
        os.kill(first.pid, signal.SIGSTOP)
        for _ in range(3):
            daemons.ensure([("GPU-a", "gpu-0")])
        assert first.returncode is not None and daemons.pipe_dir("GPU-a") is None
        daemons.daemons["GPU-a"].next_start = 0.0
        daemons.ensure([("GPU-a", "gpu-0")])
        now = daemons.daemons["GPU-a"].proc
        assert now is not None and now.pid != first.pid and daemons.pipe_dir("GPU-a") is not None
        assert daemons.health()["gpu-0"]["restarts"] == 1
    finally:
        daemons.stop()
        shutil.rmtree(pipe_base, ignore_errors=True)
