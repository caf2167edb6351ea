"""A GPU's MPS control daemon that a crashed plugin left running: the next plugin stops it, before its own
starts, through the record the first one wrote (`<plugin-dir>/mps/<gpu>/daemon`: pid and start time), with
SIGTERM and then SIGKILL for one that does not go; a record whose pid now names another process (a pid
reused after a reboot or a wrap) signals nothing; and what the dead daemon left in its pipe directory
(sockets, files, directories, a link) is removed without following a link out of it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from driver.plugin.mps import daemon
from driver.plugin.mps.daemon import RECORD_FILE, MpsDaemons, start_time

GPU = [("GPU-a", "gpu-0")]


def _control(tmp_path):
    # a control binary that cannot run: the start fails right after the orphan is handled, no daemon of ours
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text("#!/bin/sh\nexit 0\n")
    control.chmod(0o644)
    return control


def _left_running(*code: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "\n".join([*code, "import time", "time.sleep(60)"])])
    deadline = time.monotonic() + 10
    while start_time(proc.pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # its signal handlers set
    return proc


def _record(tmp_path, pid: int, started: int | None):
    root = tmp_path / "mps" / "gpu-0"
    root.mkdir(parents=True)
    (root / RECORD_FILE).write_text(f"{pid} {started}\n")
    return root / RECORD_FILE


def test_the_daemon_a_crashed_plugin_left_is_stopped_before_a_new_one_starts(tmp_path, caplog):
    orphan = _left_running()
    try:
        record = _record(tmp_path, orphan.pid, start_time(orphan.pid))
        MpsDaemons(_control(tmp_path), tmp_path / "mps").ensure(GPU)
        assert orphan.wait(timeout=5) == -signal.SIGTERM
        assert not record.exists()
        (stopped,) = [r for r in caplog.records if r.getMessage() == "mps.orphan-stopped"]
        assert stopped.fields == {"gpu": "gpu-0", "pid": orphan.pid}
    finally:
        orphan.kill()
        orphan.wait()


def test_an_orphan_that_ignores_sigterm_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(daemon, "STOP_TIMEOUT_S", 0.3)
    orphan = _left_running("import signal", "signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    try:
        _record(tmp_path, orphan.pid, start_time(orphan.pid))
        MpsDaemons(_control(tmp_path), tmp_path / "mps").ensure(GPU)
        assert orphan.wait(timeout=5) == -signal.SIGKILL
    finally:
        orphan.kill()
        orphan.wait()


@pytest.mark.parametrize("shift", [-1, 1])
def test_a_record_whose_pid_now_names_another_process_signals_nothing(tmp_path, shift, caplog):
    other = _left_running()
    try:
        record = _record(tmp_path, other.pid, start_time(other.pid) + shift)
        MpsDaemons(_control(tmp_path), tmp_path / "mps").ensure(GPU)
        time.sleep(0.2)
        assert other.poll() is None  # still running: not the daemon the record meant
        assert not record.exists()  # and the record, naming no live daemon of ours, is gone
        assert "mps.orphan-stopped" not in caplog.text
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("text", ["", "12", "x 5", "5 y", "1 2 3"])
def test_a_record_that_does_not_read_as_pid_and_start_time_is_left_alone(tmp_path, text):
    root = tmp_path / "mps" / "gpu-0"
    root.mkdir(parents=True)
    (root / RECORD_FILE).write_text(text)
    MpsDaemons(_control(tmp_path), tmp_path / "mps").ensure(GPU)
    assert (root / RECORD_FILE).read_text() == text


def test_what_a_dead_daemon_left_in_its_pipe_directory_is_removed_without_following_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host file")
    pipe = tmp_path / "mps" / "gpu-0" / "pipe"
    pipe.mkdir(parents=True)
    (pipe / "control").write_text("stale")
    (pipe / "log.d").mkdir()
    (pipe / "log.d" / "x").write_text("x")
    (pipe / "link").symlink_to(outside)
    (pipe / "file-link").symlink_to(outside / "keep")
    MpsDaemons(_control(tmp_path), tmp_path / "mps").ensure(GPU)
    assert list(pipe.iterdir()) == []
    assert (outside / "keep").read_text() == "host file"
