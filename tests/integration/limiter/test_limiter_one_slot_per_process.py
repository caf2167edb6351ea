"""Each process of a claim holds exactly one process slot of its region (region.c, claim_slot).

A slot is how a process's usage is given back when it dies: a process that took two would keep the second
one's pid alive in the region for as long as it runs, and a claim's later processes would find the slots full
sooner ("all N process slots are taken"), their usage then not reclaimable if they die. The first process
takes slot 0; a second one, with the first still alive, takes slot 1; nothing else holds a slot.
"""

from __future__ import annotations

import subprocess

from driver.limits import Region

MIB = 1 << 20


def slot_pids(region) -> list[int]:
    """The pid in each slot of the region, as `carve inspect` reads them."""
    with Region.open(region) as r:
        s = r._struct
        return [s.procs[i].pid for i in range(s.max_procs)]


def stop(p: subprocess.Popen) -> None:
    p.kill()
    p.wait()


def test_two_live_processes_of_a_claim_hold_one_slot_each(claim):
    c = claim().create(memory=8 * MIB)
    first = c.popen("hold", str(1 * MIB))
    try:
        # "ready": the first process has allocated, so it has joined the region (taken its slot)
        assert first.stdout.readline().strip() == "ready 0"
        second = c.popen("hold", str(1 * MIB))
        try:
            assert second.stdout.readline().strip() == "ready 0"
            pids = slot_pids(c.region)
            assert pids[:2] == [first.pid, second.pid], pids[:4]
            assert all(pid == 0 for pid in pids[2:]), [(i, pid) for i, pid in enumerate(pids) if pid][:8]
            with Region.open(c.region) as r:  # each one's usage in its own slot
                assert [r._struct.procs[i].used[0] for i in range(2)] == [1 * MIB, 1 * MIB]
        finally:
            stop(second)
    finally:
        stop(first)
