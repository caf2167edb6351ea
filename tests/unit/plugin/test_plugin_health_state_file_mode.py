"""The health monitor's state file (<plugin-dir>/health.json, docs/health.md: its removal is the reset)
is the plugin's own, as its checkpoint is: written 0600 whatever the umask, at start and at each change, so
nothing but root on the node reads or runs it."""

from __future__ import annotations

import os
import stat

from driver.plugin.health.monitor import HealthMonitor
from driver.plugin.health.policy import CAUSE_LOST


def test_the_state_file_is_written_0600_at_start_and_at_each_change(tmp_path):
    state = tmp_path / "health.json"
    old = os.umask(0)
    try:
        monitor = HealthMonitor([("GPU-0", 0)], lambda changes: None, state)
        monitor._load()  # start: no file yet, one is written
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        os.chmod(state, 0o644)
        monitor._emit(monitor._observe("GPU-0", CAUSE_LOST))
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
    finally:
        os.umask(old)
