"""CARVE_FAULT (driver/plugin/faults.py): the plugin process SIGKILLs itself at the named point and only
there, saying so in its log first, so the crash-safety tests stop it exactly where they mean to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from driver.plugin.faults import ENV_FAULT, PREPARE_POINTS, UNPREPARE_POINTS

ROOT = Path(__file__).resolve().parents[3]
# a process that sets up the plugin's log and passes the points in order, as prepare then unprepare do
SCRIPT = """
import sys
from driver.plugin import faults, logfmt
logfmt.setup("info")
for point in sys.argv[1:]:
    print("passed", point, flush=True)
    faults.reached(point)
print("done", flush=True)
"""


def _run(env_value: str | None, points: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != ENV_FAULT}
    if env_value is not None:
        env[ENV_FAULT] = env_value
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *points], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


POINTS = [*PREPARE_POINTS, *UNPREPARE_POINTS]


@pytest.mark.parametrize("point", [PREPARE_POINTS[0], UNPREPARE_POINTS[-1]])
def test_the_named_point_kills_the_process_there_and_the_log_says_so_first(point):
    r = _run(point, POINTS)
    assert r.returncode == -signal.SIGKILL
    passed = [line.split()[1] for line in r.stdout.splitlines()]
    assert passed == POINTS[: POINTS.index(point) + 1]  # every point up to it, none after
    assert "done" not in r.stdout
    assert "fault.injected" in r.stderr and f"point={point}" in r.stderr


@pytest.mark.parametrize("value", [None, "", "no-such-point"])
def test_without_a_matching_point_every_point_passes(value):
    r = _run(value, POINTS)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "done"
    assert "fault.injected" not in r.stderr
