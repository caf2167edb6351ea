"""A kill of a process that exited (and was reaped) before the enforcer's signal: pidfd_kill opens the
pidfd first, so it reports the process gone (ProcessLookupError, which the enforcer counts as no kill and
no error), instead of going on to read a cgroup that no longer exists and refusing (PermissionError, which
the enforcer logs as a failed kill)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.cgroups import pod_uid

from driver.plugin.enforcement.attribution import pidfd_kill


def test_an_exited_process_is_reported_gone_not_refused() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    assert gone.wait(timeout=60) == 0  # reaped: its pid names no process now
    with pytest.raises(ProcessLookupError) as e:
        pidfd_kill(gone.pid, {pod_uid(1)})  # the host's /proc, as the plugin reads it
    assert str(gone.pid) in str(e.value)
