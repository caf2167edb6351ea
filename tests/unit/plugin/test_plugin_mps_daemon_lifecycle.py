"""An mps GPU's control daemon over the plugin's life (driver/plugin/mps/daemon.py): without the control
binary in the driver root the GPU's health says so and no start is tried again (nothing would change
without a new driver root, i.e. a plugin restart); a GPU that is no longer mps has its daemon asked to quit,
stopped and its directory (pipe, logs, the record naming the daemon) removed; a claim of the GPU then finds
no pipe directory, so its prepare fails instead of mounting a dead daemon's pipe."""

from __future__ import annotations

import logging
import subprocess
import sys

from driver.plugin.mps import daemon
from driver.plugin.mps.daemon import DaemonState, MpsDaemons

GPU = [("GPU-a", "gpu-0")]


def test_without_the_control_binary_the_gpu_says_so_and_no_start_is_retried(tmp_path, caplog):
    daemons = MpsDaemons(None, tmp_path / "mps")
    with caplog.at_level(logging.ERROR):
        daemons.ensure(GPU)
        daemons.ensure(GPU)
    assert daemons.health() == {
        "gpu-0": {
            "uuid": "GPU-a",
            "healthy": False,
            "restarts": 0,
            "error": "nvidia-cuda-mps-control not found in the driver root",
            "pid": None,
        }
    }
    assert daemons.pipe_dir("GPU-a") is None
    assert daemons.state_dir("GPU-a") == tmp_path / "mps" / "gpu-0" and daemons.state_dir("GPU-b") is None
    assert [r.getMessage() for r in caplog.records] == ["mps.unavailable"]  # once: never retried
    assert not (tmp_path / "mps").exists()  # nothing made for a daemon that cannot run


def test_a_gpu_no_longer_mps_has_its_daemon_stopped_and_its_directory_removed(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(daemon, "STOP_TIMEOUT_S", 0.5)
    quits = tmp_path / "quits"
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text(f'#!/bin/sh\ncat >> "{quits}"\nexit 0\n')  # records what it is told, then exits
    control.chmod(0o755)
    daemons = MpsDaemons(control, tmp_path / "mps")
    root = tmp_path / "mps" / "gpu-0"
    (root / "pipe").mkdir(parents=True)
    (root / "daemon").write_text("1 1\n")
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    daemons.daemons["GPU-a"] = DaemonState("GPU-a", "gpu-0", root, proc=running, healthy=True)
    assert daemons.pipe_dir("GPU-a") == root / "pipe"
    with caplog.at_level(logging.INFO):
        daemons.ensure([])  # the GPU's strategy changed: no mps GPU left
    assert running.wait(timeout=5) is not None
    assert quits.read_text() == "quit\n"  # asked to quit first, as NVIDIA documents
    assert not root.exists() and daemons.daemons == {} and daemons.pipe_dir("GPU-a") is None
    (r,) = [r for r in caplog.records if r.getMessage() == "mps.daemon-stopped"]
    assert r.fields == {"gpu": "gpu-0", "uuid": "GPU-a"}


def test_stop_stops_every_daemon(tmp_path, monkeypatch):
    monkeypatch.setattr(daemon, "STOP_TIMEOUT_S", 0.5)
    control = tmp_path / "nvidia-cuda-mps-control"
    control.write_text("#!/bin/sh\ncat >/dev/null\nexit 1\n")  # a quit that fails: the signals still stop it
    control.chmod(0o755)
    daemons = MpsDaemons(control, tmp_path / "mps")
    procs = []
    for i in range(2):
        root = tmp_path / "mps" / f"gpu-{i}"
        root.mkdir(parents=True)
        procs.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        daemons.daemons[f"GPU-{i}"] = DaemonState(f"GPU-{i}", f"gpu-{i}", root, proc=procs[-1], healthy=True)
    daemons.stop()
    assert [p.poll() for p in procs] == [-15, -15] and daemons.daemons == {}
