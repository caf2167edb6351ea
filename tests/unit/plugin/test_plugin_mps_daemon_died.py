"""An MPS control daemon that exited: restarted after BACKOFF_MIN_S when it had run STABLE_S or more (a
crash after a long healthy run is not a crash loop), after double the last back-off when it died sooner;
counted as a restart only when it had been healthy, and its health says how it exited."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from driver.plugin.mps import daemon
from driver.plugin.mps.daemon import BACKOFF_MIN_S, STABLE_S, DaemonState, MpsDaemons

NOW = 100_000.0


@pytest.mark.parametrize(
    ("ran_s", "backoff_before", "backoff_after"),
    [(STABLE_S, 8.0, BACKOFF_MIN_S), (STABLE_S + 3600, 300.0, BACKOFF_MIN_S), (STABLE_S - 1, 8.0, 16.0),
     (NOW - 10.0, 8.0, BACKOFF_MIN_S),  # started 10 s after boot, ran ever since
     (5.0, 1.0, 2.0), (5.0, 0.0, BACKOFF_MIN_S)],
)  # fmt: skip
def test_a_dead_daemon_backs_off_by_how_long_it_ran(
    tmp_path, monkeypatch, ran_s, backoff_before, backoff_after
):
    monkeypatch.setattr(daemon, "time", SimpleNamespace(monotonic=lambda: NOW, sleep=time.sleep))
    daemons = MpsDaemons(tmp_path / "no-control", tmp_path / "mps")
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    d = daemons.daemons["GPU-a"] = DaemonState(
        "GPU-a", "gpu-0", tmp_path / "mps" / "gpu-0", proc=dead, healthy=True, started_at=NOW - ran_s,
        backoff_s=backoff_before,
    )  # fmt: skip
    d.root.mkdir(parents=True)
    daemons.ensure([("GPU-a", "gpu-0")])
    assert d.proc is None and d.backoff_s == backoff_after and d.next_start == NOW + backoff_after
    assert d.restarts == 1
    assert daemons.health()["gpu-0"] == {
        "uuid": "GPU-a", "healthy": False, "restarts": 1, "error": "exited with status 3", "pid": None,
    }  # fmt: skip


def test_a_daemon_that_died_before_it_was_healthy_is_not_counted_as_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(daemon, "time", SimpleNamespace(monotonic=lambda: NOW, sleep=time.sleep))
    daemons = MpsDaemons(tmp_path / "no-control", tmp_path / "mps")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    d = daemons.daemons["GPU-a"] = DaemonState(
        "GPU-a", "gpu-0", tmp_path / "mps" / "gpu-0", proc=dead, started_at=NOW - 1, backoff_s=1.0
    )
    d.root.mkdir(parents=True)
    daemons.ensure([("GPU-a", "gpu-0")])
    assert d.restarts == 0 and d.backoff_s == 2.0
