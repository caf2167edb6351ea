"""Process slots in a claim's region (region.c): a process takes a free slot whose byte no one has locked,
reclaims a dead process's slot when none is free, and when every slot belongs to a live process it says so
and still counts its usage. Liveness is the open-file-description lock on a slot's first byte; this test
holds such locks itself to play a live process, and a region written with few slots (max_procs) stands for a
full one.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import re
import struct
import subprocess

from driver.limits import Region
from driver.limits.region import ProcStruct, RegionStruct

MIB = 1 << 20
F_OFD_SETLK = 37  # linux/fcntl.h


def slot_offset(i: int) -> int:
    return RegionStruct.procs.offset + i * ctypes.sizeof(ProcStruct)


def lock_slot(fd: int, i: int) -> None:
    """An open file description's write lock on slot i's first byte, as a live process holds its own."""
    fcntl.fcntl(
        fd, F_OFD_SETLK, struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, slot_offset(i), 1, 0)
    )


def set_slots(region, max_procs: int, pid0: int = 0, used0: int = 0) -> None:
    with Region.open(region) as r:
        s = r._struct
        s.max_procs = max_procs
        s.procs[0].pid, s.procs[0].host_pid = pid0, pid0
        s.procs[0].used[0] = used0
        s.devices[0].memory_used = used0
        del s


def gone_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_with_no_free_slot_a_dead_processs_slot_is_reclaimed_and_taken(claim):
    c = claim().create(memory=8 * MIB)
    dead = gone_pid()
    set_slots(c.region, max_procs=1, pid0=dead, used0=6 * MIB)  # the only slot: a dead process's
    out = c.run("alloc", str(6 * MIB), CARVE_LOG="info")
    assert out.stdout.strip() == "0" and "slots are taken" not in out.stderr, out.stderr
    reclaimed = re.findall(
        r"info: region .*: reclaimed the usage of dead process (-?\d+) \(slot (\d+)\)$", out.stderr, re.M
    )
    assert reclaimed == [(str(dead), "0")], out.stderr  # that one, once; a free slot is not "dead"
    with Region.open(c.region) as r:  # the process had the slot: its exit gave everything back
        assert r.used_bytes(0) == 0 and r.processes() == []


def test_when_every_slot_is_a_live_processs_the_usage_is_still_counted(claim):
    c = claim().create(memory=8 * MIB)
    set_slots(c.region, max_procs=1, pid0=os.getpid(), used0=2 * MIB)
    fd = os.open(c.region, os.O_RDWR)
    try:
        lock_slot(fd, 0)  # the slot's owner is alive
        out = c.run("alloc", str(7 * MIB))
        assert out.stdout.strip() == "2"  # 2 MiB held by the live process + 7 MiB is over the quota
        out = c.run("alloc", str(1 * MIB))
        assert out.stdout.strip() == "0"
        warned = re.findall(
            rf"^carve-limiter\[\d+\] warn: region {c.region}: all 1 process slots are taken; "
            r"this process's usage is counted but cannot be reclaimed if it dies$",
            out.stderr,
            re.M,
        )
        assert len(warned) == 1, out.stderr  # said once, when the process joined: not again at its allocation
        with Region.open(c.region) as r:
            assert [p.pid for p in r.processes()] == [os.getpid()]
    finally:
        os.close(fd)


def test_a_free_slot_still_locked_by_its_dying_owner_is_passed_over(claim):
    c = claim().create(memory=8 * MIB)
    set_slots(c.region, max_procs=2)  # slot 0 is free, but its last owner has not let go of its lock yet
    fd = os.open(c.region, os.O_RDWR)
    lock_slot(fd, 0)
    holder = c.popen("hold", str(1 * MIB))
    try:
        assert holder.stdout.readline().strip() == "ready 0"
        with Region.open(c.region) as r:
            assert [r._struct.procs[0].pid, r._struct.procs[1].pid] == [0, holder.pid]
            assert r._struct.procs[1].used[0] == 1 * MIB
    finally:
        holder.kill()
        holder.wait()
        os.close(fd)


def test_a_slot_another_process_is_claiming_or_reclaiming_is_left_alone(claim):
    # CARVE_SLOT_BUSY (-1): a process is between taking the slot and locking it, or giving it back. It holds
    # no lock yet, but it is not dead: its usage stays counted, and nobody else takes or clears the slot.
    c = claim().create(memory=8 * MIB)
    set_slots(c.region, max_procs=2, pid0=-1, used0=6 * MIB)
    out = c.run("alloc", str(6 * MIB))
    assert out.stdout.strip() == "2", out.stderr  # 6 MiB counted + 6 MiB is over the quota
    with Region.open(c.region) as r:
        assert (r._struct.procs[0].pid, r.used_bytes(0)) == (-1, 6 * MIB)


def test_free_slots_are_not_dead_processes(claim):
    c = claim().create(memory=8 * MIB)
    out = c.run("alloc", str(1 * MIB), CARVE_LOG="info")
    assert out.stdout.strip() == "0" and "reclaimed" not in out.stderr, out.stderr
