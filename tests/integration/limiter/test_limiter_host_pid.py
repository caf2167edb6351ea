"""The pid a process's slot gives for NVML (`host_pid`): NVML reports the host's pids, and the plugin matches
them to the claim's slots. The limiter fills it in when it can see it (docs/limiter.md): in the host's pid
namespace its own pid; in a namespace of its own whose parent it can see (NSpid in /proc/self/status lists
more than one pid), the outermost; when its /proc shows only its own namespace, 0: the plugin fills it in.

Each process runs `hold` (allocate, then wait) under unshare(1), and the test reads its slot.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from limiter_harness import CLIENT

from driver.limits import Region

MIB = 1 << 20
UNSHARE = shutil.which("unshare")


def slot_of_holder(c, *wrapper: str) -> tuple[int, int, int]:
    """(pid in the slot, host_pid in the slot, the holder's pid as this test sees it)."""
    proc = subprocess.Popen(
        [*wrapper, str(CLIENT), "hold", str(MIB)], env=c.env(), stdout=subprocess.PIPE, text=True
    )
    holder = None
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready 0", line
        holder = proc.pid
        if wrapper:  # unshare --fork: the holder is unshare's child
            holder = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        with Region.open(c.region) as r:
            (p,) = [p for p in r.processes() if p.pid > 0]
        return p.pid, p.host_pid, holder
    finally:
        if holder is not None and holder != proc.pid:  # killing unshare alone would leave it running
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_in_the_hosts_pid_namespace_the_slot_gives_the_processs_pid(claim):
    c = claim().create(memory=8 * MIB)
    pid, host_pid, holder = slot_of_holder(c)
    assert pid == host_pid == holder


@pytest.mark.skipif(os.geteuid() != 0 or UNSHARE is None, reason="a pid namespace needs root and unshare(1)")
def test_in_a_pid_namespace_whose_parent_it_sees_the_slot_gives_the_outer_pid(claim):
    c = claim().create(memory=8 * MIB)
    pid, host_pid, holder = slot_of_holder(c, UNSHARE, "--pid", "--fork")
    assert pid == 1  # the first process of its namespace
    assert host_pid == holder  # its pid here, the host's


@pytest.mark.skipif(os.geteuid() != 0 or UNSHARE is None, reason="a pid namespace needs root and unshare(1)")
def test_in_a_pid_namespace_with_its_own_proc_the_slot_leaves_the_host_pid_to_the_plugin(claim):
    c = claim().create(memory=8 * MIB)
    pid, host_pid, _ = slot_of_holder(c, UNSHARE, "--pid", "--fork", "--mount-proc")
    assert (pid, host_pid) == (1, 0)
