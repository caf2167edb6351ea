"""A slot in transition (CARVE_SLOT_BUSY, pid -1: a process is taking it, giving it back, or reclaiming a dead
process's usage from it) names no process of the claim (feedback.c, the claim's pids for NVML's samples).

Its host_pid is still the last owner's: a dead process whose pid the host may already have given to another
container's process. Read as the claim's, that neighbour's busy time would count as the claim's own, and the
claim would run unthrottled next to it. Here the neighbour, busy all along, is that pid; the claim's own
process takes another slot, so its pid is known and the limiter does not guess.
"""

from __future__ import annotations

import time

from driver.limits import Region

KERNEL_NS = 1_000_000
BUSY_SLOT = -1  # CARVE_SLOT_BUSY (carve_region.h)


def test_a_neighbour_whose_pid_a_busy_slot_still_holds_is_a_neighbour(claim):
    mine = claim("mine").create(cores=50)  # core policy "default": throttled only next to a busy neighbour
    neighbour = claim("neighbour").popen("launch", "3", "64", str(KERNEL_NS))  # another claim's, no limit
    with Region.open(mine.region) as r:  # a slot being reclaimed: its last owner's pid, now the neighbour's
        p = r._struct.procs[5]
        p.pid, p.host_pid = BUSY_SLOT, neighbour.pid
        del p
    client = mine.popen("launch", "3", "64", str(KERNEL_NS), CARVE_TICK_MS="20")
    targets = set()
    try:
        while client.poll() is None:
            with Region.open(mine.region) as r:
                targets.add(r._struct.devices[0].target)
            time.sleep(0.02)
    finally:
        for proc in (client, neighbour):
            proc.wait(timeout=60)
    assert client.returncode == 0 and neighbour.returncode == 0
    # the neighbour's busy time is another process's: the claim is throttled to its share (0: before the first
    # tick, 100: a tick that sampled only one of them)
    assert 50 in targets and targets <= {0, 50, 100}, targets
