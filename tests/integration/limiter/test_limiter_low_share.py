"""A low-priority claim yields to a busy high-priority neighbour by dropping to 10% of the GPU, never by
rising to it: a share already under 10% is kept. What the limiter aims at each tick is the region's `target`,
which the plugin reads for its metrics; this checks it, not a measured occupancy.

The neighbour must be seen busy for the claim to yield; on a machine too starved for that to happen the
target is the claim's share all along, and this test cannot fail for it.
"""

from __future__ import annotations

import time

from driver.limits import Region

KERNEL_NS = 1_000_000


def test_a_low_priority_share_under_10_percent_is_kept_while_it_yields(claim):
    low = claim("low").create(cores=5, priority="low", core_policy="force")
    low.rewrite_limits(high_neighbours=(1,))  # the plugin: a high-priority claim shares this GPU
    neighbour = claim("neighbour").popen("launch", "3", "64", str(KERNEL_NS))  # no limit: busy the whole time
    client = low.popen("launch", "3", "64", str(KERNEL_NS), CARVE_TICK_MS="20")
    targets = set()
    try:
        while client.poll() is None:
            with Region.open(low.region) as r:
                targets.add(r._struct.devices[0].target)
            time.sleep(0.02)
    finally:
        for p in (client, neighbour):
            p.wait(timeout=60)
    assert client.returncode == 0 and neighbour.returncode == 0
    assert 5 in targets and targets <= {0, 5}, targets  # 0: before the first tick
