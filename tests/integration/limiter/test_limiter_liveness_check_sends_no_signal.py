"""Checking whether a slot's process is alive sends it nothing (region.c, the dead-process check without
OFD locks: `kill(pid, 0)`, signal 0, which only asks whether the pid exists). The process checked is another
of the claim's, running: a real signal would stop it, SIGHUP (1) ending any process that keeps its
default action.

The process here is a `sleep` with SIGHUP at its default action (the test's own process may ignore it: a
run under nohup does), in a slot of the claim as the limiter would have filled it; the client allocates
with the fcntl OFD locks refused (the shim of test_limiter_boundaries.py), so the scan checks the slot with
kill()."""

from __future__ import annotations

import signal
import subprocess

import pytest
from limiter_harness import LIMITER
from test_limiter_boundaries import NO_OFD_SHIM, _slot_of, start_time

MIB = 1 << 20


@pytest.fixture
def no_ofd(tmp_path) -> str:
    """LD_PRELOAD with test_limiter_boundaries.py's shim first: the limiter's F_OFD_* calls fail."""
    source = tmp_path / "no_ofd.c"
    source.write_text(NO_OFD_SHIM)
    shim = tmp_path / "libno_ofd.so"
    command = ["cc", "-shared", "-fPIC", "-o", str(shim), str(source)]
    built = subprocess.run(command, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return f"{shim} {LIMITER}"


def test_a_live_process_checked_without_ofd_locks_gets_no_signal(claim, no_ofd: str) -> None:
    c = claim().create(memory=8 * MIB)
    live = subprocess.Popen(["sleep", "120"], preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        _slot_of(c.region, live.pid, start_time(live.pid), 6 * MIB)
        # the live process's 6 MiB stay: 4 MiB more do not fit the 8 MiB
        assert c.run("alloc", str(4 * MIB), LD_PRELOAD=no_ofd).stdout.strip() == "2"
        # a signal sent would have ended it by now, or within the second it is given
        with pytest.raises(subprocess.TimeoutExpired):
            live.wait(timeout=1)
    finally:
        live.kill()
        live.wait(timeout=60)
