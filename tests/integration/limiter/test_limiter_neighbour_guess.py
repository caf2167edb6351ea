"""A claim under the default core policy is throttled to its share only while a neighbour is busy on its GPU.
Which processes are the claim's is told by the host pids in its region's slots; while none of them is known
(a pid namespace the plugin has not resolved yet) the limiter guesses: more busy processes on the GPU than the
claim has live ones means a neighbour. What the limiter aims at each tick is the region's `target` (100 when
not throttled), which this reads, not a measured occupancy.

The neighbour's kernels keep the fake GPU's timeline busy for its pid whether or not it got a CPU, so a tick
that samples both processes busy comes in the first ticks of a 3 s run, on a loaded machine too.
"""

from __future__ import annotations

import time

import pytest

from driver.limits import Region

KERNEL_NS = 1_000_000


@pytest.mark.parametrize("busy_neighbour", [True, False])
def test_with_no_pid_of_the_claim_known_a_second_busy_process_is_a_neighbour(claim, busy_neighbour):
    mine = claim("mine").create(cores=50)  # core policy "default": throttled only next to a busy neighbour
    # the neighbour: another claim's process without a limit, busy all along (or idle: it only runs `info`)
    neighbour = claim("neighbour").popen(
        *(["launch", "3", "64", str(KERNEL_NS)] if busy_neighbour else ["info"])
    )
    client = mine.popen("launch", "3", "64", str(KERNEL_NS), CARVE_TICK_MS="20")
    targets, utilizations = set(), set()
    forgotten = False
    try:
        while client.poll() is None:
            with Region.open(mine.region) as r:
                procs = r._struct.procs
                if not forgotten and procs[0].pid > 0:
                    procs[0].host_pid = 0  # the client's slot, its host pid not known (yet)
                    forgotten = True
                elif forgotten:
                    assert procs[0].host_pid == 0
                    targets.add(r._struct.devices[0].target)
                    utilizations.add(r.utilization(0))
                del procs
            time.sleep(0.02)
    finally:
        for p in (client, neighbour):
            p.wait(timeout=60)
    assert client.returncode == 0 and neighbour.returncode == 0
    assert forgotten, targets
    # with no pid of its own known, the claim's share of the GPU is all the busy time NVML saw: its own client
    # is busy, so some tick measured it above 0 (the region's `utilization`, which metrics report)
    assert max(utilizations) > 0, utilizations
    if busy_neighbour:
        assert 50 in targets and targets <= {0, 50, 100}, targets  # 0: before the first tick
    else:
        assert targets <= {0, 100}, targets  # the claim's own process alone is not a neighbour
