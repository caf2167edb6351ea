"""How a process's usage leaves the claim.

A process that forks: the child's allocations are its own (a slot of its own in the claim's region, its own
lock), the parent's stay the parent's, and whatever the child held comes back when it exits or is killed.
The fake driver lets a forked child use CUDA (the real one refuses a child of an initialised parent, but a
child still runs the limiter's fork handler and its exit handler, which must not touch the parent's slot).

A process that exits: what it held goes back once, even when an exit handler that runs after the limiter's
frees some of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest
from limiter_harness import write_claim

from driver.limits import ClaimLimits, DeviceLimit, Region

MIB = 1 << 20


@pytest.mark.parametrize("end", ["exit", "kill"])
def test_a_forked_childs_usage_is_its_own_and_returns_when_it_ends(claim, end):
    c = claim().create(memory=8 * MIB)
    proc = c.run("fork", str(2 * MIB), str(4 * MIB), end)
    # nothing to warn of: the child mapped the region again through its own descriptor
    assert "cannot map it again" not in proc.stderr, proc.stderr
    child, parent = (json.loads(line) for line in proc.stdout.strip().splitlines())
    assert child["who"] == "child" and parent["who"] == "parent"
    # while the child runs: two slots, each with its own usage, one claim total
    assert child["rc"] == 0 and child["used"] == 6 * MIB
    assert sorted(map(tuple, child["slots"])) == sorted([(parent["pid"], 2 * MIB), (child["pid"], 4 * MIB)])
    # the child is gone (its exit handler ran, or it was killed and its slot reclaimed): the parent's 4 MiB
    # fit again, and only the parent's slot is left, holding both of its allocations
    assert parent["rc"] == 0 and parent["used"] == 6 * MIB
    assert parent["slots"] == [[parent["pid"], 6 * MIB]]


def test_the_fork_handler_leaves_a_process_its_own_descriptors(claim):
    # A process that closed every descriptor (a daemon does) and opened its own gets the number the limiter
    # held its region on; the child's fork handler reopens the region and must not close that file.
    c = claim().create(memory=8 * MIB)
    c.run("fork", str(2 * MIB), str(4 * MIB), "closeall")  # the client fails when the child's pipe is closed


@pytest.mark.parametrize("count", [1, 70_000])
def test_a_free_after_the_limiters_exit_handler_does_not_release_the_claims_usage_twice(claim, count):
    # A C++ static destructor (or an atexit handler registered before the first CUDA call) frees after the
    # limiter's exit handler has given the process's usage back: that free must not take the same bytes off
    # the claim again, which would let the claim's other processes go past the quota. 70,000 buffers are
    # more than the limiter's allocation table holds (65,536): the ones past it are settled at exit too.
    c = claim().create(memory=8 * MIB)
    holder = c.popen("hold", str(4 * MIB))
    try:
        assert holder.stdout.readline().strip() == "ready 0"
        done = c.run("exitfree", str(2 * MIB), str(count))
        assert done.stdout.strip() == "0" and "FAIL" not in done.stderr
        with Region.open(c.region) as r:
            assert r.used_bytes(0) == 4 * MIB  # the holder's, still counted
        assert c.run("alloc", str(5 * MIB)).stdout.strip() == "2"  # 4 + 5 MiB is over the 8 MiB quota
    finally:
        holder.kill()
        holder.wait()


def test_allocations_after_the_exit_handler_on_two_devices_of_a_claim_take_one_slot(claim):
    # The first allocation after the exit handler takes the process a slot again; one on the claim's other
    # device joins the same slot (carve_region_join: a process holds one slot per region), not a second.
    c = claim(gpus="2xT4")
    two = (DeviceLimit(8 * MIB, 0), DeviceLimit(8 * MIB, 0))
    write_claim(c.region, ClaimLimits(devices=two, region_path=str(c.region)))
    done = c.run("exitalloc", str(3 * MIB), "1", CLIENT_ORDINAL="0")
    assert done.stdout.split() == ["0", "0", "0", "0"] and "FAIL" not in done.stderr
    with Region.open(c.region) as r:
        assert [p.used[:2] for p in r.processes()] == [(3 * MIB, 3 * MIB)]


@pytest.mark.parametrize("ordinal", [0, 1])
def test_an_allocation_after_the_limiters_exit_handler_comes_back_when_the_process_is_gone(claim, ordinal):
    # An exit handler that runs after the limiter's (a C++ static destructor) allocates and keeps the
    # allocation: the driver frees it when the process ends, so the claim must get it back then too, not
    # count it for good (the process's slot was already given back when it was made). On either device of
    # a claim of two.
    c = claim(gpus="2xT4")
    two = (DeviceLimit(8 * MIB, 0), DeviceLimit(8 * MIB, 0))  # by position: ordinals 0 and 1
    write_claim(c.region, ClaimLimits(devices=two, region_path=str(c.region)))
    done = c.run("exitalloc", str(3 * MIB), CLIENT_ORDINAL=str(ordinal))
    assert done.stdout.split() == ["0", "0", "0"] and "FAIL" not in done.stderr
    with Region.open(c.region) as r:
        # counted once, in a slot of the process's own, which the claim reclaims once the process is gone
        assert r.used_bytes(ordinal) == 3 * MIB
        assert [p.used[ordinal] for p in r.processes()] == [3 * MIB]
    # the process is gone: the next one finds the whole quota free
    assert c.run("alloc", str(8 * MIB), CLIENT_ORDINAL=str(ordinal)).stdout.strip() == "0"
    with Region.open(c.region) as r:
        assert r.used_bytes(ordinal) == 0  # and gives its own back at its exit


def test_a_forked_child_that_holds_memory_is_alive_to_the_claims_other_processes(claim):
    # The child's slot is locked through its own descriptor of the region (reopened at the fork): another
    # process near the quota reclaims the slots of dead processes only, so the live child's usage stays
    # counted and the claim's quota holds.
    c = claim().create(memory=8 * MIB)
    with forked_holder(c, 1 * MIB, 6 * MIB) as (_, child):
        assert child["rc"] == 0 and child["used"] == 7 * MIB, child
        assert c.run("alloc", str(4 * MIB)).stdout.strip() == "2"  # 7 + 4 MiB is over the 8 MiB quota
        with Region.open(c.region) as r:
            assert r.used_bytes(0) == 7 * MIB


def test_a_parent_killed_while_its_forked_child_runs_gives_its_usage_back(claim):
    # The parent's slot lock belongs to its open file description of the region. The child gives up both its
    # references to it at the fork: the inherited descriptor (closed) and the inherited mapping (mapped again
    # through its own descriptor). So once the parent is killed its slot is unlocked, and its usage comes back
    # to the claim's next process near the quota while the child's stays counted. (Before the mapping was
    # redone, a killed parent's usage stayed counted for as long as any child it forked lived.)
    c = claim().create(memory=8 * MIB)
    with forked_holder(c, 6 * MIB, 1 * MIB) as (parent, child):
        assert child["used"] == 7 * MIB, child
        parent.kill()
        parent.wait()
        assert c.run("alloc", str(4 * MIB)).stdout.strip() == "0"  # the parent's 6 MiB came back
        with Region.open(c.region) as r:  # (that process has exited: its 4 MiB went back too)
            assert r.used_bytes(0) == 1 * MIB
            assert [p.pid for p in r.processes() if p.pid > 0] == [child["pid"]]


@contextlib.contextmanager
def forked_holder(c, parent_bytes: int, child_bytes: int):
    """The client's `fork ... hold`: the parent (a Popen) and the child's line (its allocation and the slots);
    both are killed at the end."""
    proc = c.popen("fork", str(parent_bytes), str(child_bytes), "hold")
    child = None
    try:
        child = json.loads(proc.stdout.readline())
        assert child["who"] == "child", child
        yield proc, child
    finally:
        proc.kill()
        proc.wait()
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child["pid"], signal.SIGKILL)
