"""A mutant's test run leaves nothing running (hack/mutation/execute.py run_tests): what the owner's tests
started goes with pytest's process group, whether the run failed, passed or timed out. A client a mutant
made loop forever once spun on a core for an hour after its pytest was killed, through every later run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from mutation import config, execute

# The test starts a sleeper in its own process group (pytest's), records its pid, then ends as asked.
TEST = """
import pathlib, subprocess, sys, time

def test_leaves_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    (pathlib.Path(__file__).parent / "child.pid").write_text(str(child.pid))
    {end}
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (not yet reaped by init) is dead too
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


@pytest.mark.parametrize(
    ("end", "verdict", "timeout"),
    [("assert False", "failed", 60), ("pass", "passed", 60), ("time.sleep(300)", "timeout", 8)],
)
def test_what_the_tests_started_is_gone_after_the_run(tmp_path, monkeypatch, end, verdict, timeout):
    monkeypatch.setattr(config, "ROOT", tmp_path)
    (tmp_path / "test_left.py").write_text(TEST.format(end=end))
    got, _, _ = execute.run_tests(("test_left.py",), timeout, sys.executable)
    assert got == verdict
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:  # SIGKILL is delivered at once; reaping may lag
        time.sleep(0.05)
    assert not _alive(pid), f"the test's child {pid} outlived the run ({verdict})"
