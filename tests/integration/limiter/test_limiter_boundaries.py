"""Edges of the memory accounting: an allocation that fills the quota exactly, and the reclaim of a dead
process's usage where open-file-description locks are unavailable (its pid may already be reused).

Without OFD locks (an old kernel, some network filesystems) the limiter decides liveness from the slot's
pid, its start time and its pid namespace. A small preloaded shim makes F_OFD_* fail, as such a kernel does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from limiter_harness import LIMITER

from driver.limits import Region

MIB = 1 << 20

NO_OFD_SHIM = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>
/* fcntl as on a kernel without open-file-description locks (before 3.15): F_OFD_* are EINVAL */
int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    if (cmd == F_OFD_GETLK || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW) {
        errno = EINVAL;
        return -1;
    }
    return (int)syscall(SYS_fcntl, fd, cmd, arg);
}
"""


def start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


@pytest.fixture
def no_ofd(tmp_path) -> str:
    source = tmp_path / "no_ofd.c"
    source.write_text(NO_OFD_SHIM)
    shim = tmp_path / "libno_ofd.so"
    built = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(shim), str(source)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    return f"{shim} {LIMITER}"  # the shim first: the limiter's fcntl calls reach it


@pytest.mark.parametrize(
    ("allocs", "expected"),
    [
        ([8 * MIB, 1], [0, 2]),  # the whole quota in one allocation, then not one byte more
        ([4 * MIB, 4 * MIB, 1], [0, 0, 2]),  # filled exactly by two
        ([8 * MIB + 1], [2]),
    ],
)
def test_an_allocation_that_fills_the_quota_exactly_is_granted(claim, allocs, expected):
    c = claim().create(memory=8 * MIB)
    assert c.json("multi", *(f"0:{n}" for n in allocs))["rc"] == expected


def _slot_of(region_path, pid: int, start: int, used: int, index: int = 7) -> None:
    """A slot as a process that took it and died would leave it: pid, start time, namespace, usage (added
    to the claim's)."""
    with Region.open(region_path) as r:
        s = r._struct
        slot = s.procs[index]
        slot.pid, slot.host_pid, slot.start_time = pid, pid, start
        slot.pid_ns = os.stat("/proc/self/ns/pid").st_ino
        slot.used[0] = used
        s.devices[0].memory_used += used
        del slot, s


def test_without_ofd_locks_a_reused_pid_does_not_keep_the_dead_processs_usage(claim, no_ofd):
    c = claim().create(memory=8 * MIB)
    # the dead process's pid now belongs to a live process (this test's): another start time
    _slot_of(c.region, os.getpid(), start_time(os.getpid()) + 1, 6 * MIB)
    assert c.run("alloc", str(6 * MIB), LD_PRELOAD=no_ofd).stdout.strip() == "0"  # reclaimed
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 0 and all(p.pid != os.getpid() for p in r.processes())


def test_without_ofd_locks_a_live_process_keeps_its_usage(claim, no_ofd):
    c = claim().create(memory=8 * MIB)
    _slot_of(c.region, os.getpid(), start_time(os.getpid()), 6 * MIB)  # the very process: alive
    assert c.run("alloc", str(6 * MIB), LD_PRELOAD=no_ofd).stdout.strip() == "2"
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 6 * MIB


def test_without_ofd_locks_a_live_process_after_a_gone_one_keeps_its_usage(claim, no_ofd):
    # The scan reaches the gone process's slot first: its kill(pid, 0) fails with ESRCH and leaves errno so.
    # The live process's kill succeeds, and leaves errno as it was: only the call's result says it lives.
    c = claim().create(memory=8 * MIB)
    gone = subprocess.Popen(["true"])
    gone.wait()
    _slot_of(c.region, gone.pid, 12345, 2 * MIB, index=6)
    _slot_of(c.region, os.getpid(), start_time(os.getpid()), 4 * MIB, index=7)  # this very process
    assert c.run("alloc", str(2 * MIB), LD_PRELOAD=no_ofd).stdout.strip() == "0"
    with Region.open(c.region) as r:
        # the gone process's 2 MiB came back, the live one's 4 MiB stay (the client's went when it exited)
        assert r.used_bytes(0) == 4 * MIB
        assert [p.pid for p in r.processes() if p.pid > 0] == [os.getpid()]


def test_without_ofd_locks_a_pid_that_is_gone_is_reclaimed(claim, no_ofd):
    c = claim().create(memory=8 * MIB)
    gone = subprocess.Popen(["true"])
    gone.wait()
    _slot_of(c.region, gone.pid, 12345, 6 * MIB)
    assert c.run("alloc", str(6 * MIB), LD_PRELOAD=no_ofd).stdout.strip() == "0"
