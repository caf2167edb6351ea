"""A graph's launch is charged the blocks of every kernel node in it, whatever node comes first.

The limiter counts a graph's blocks once, when it is instantiated (native/src/throttle.c, graph_blocks): it
walks the graph's nodes and adds up the grid of each kernel node. A graph of several kernels is what CUDA
graphs are for (a captured training step is hundreds of kernels); a limiter that stopped after the first
node, or that skipped the kernels behind another kind of node, would charge such a graph far less than it
runs, and the claim would get more of the GPU than its share (test_limiter_grid.py charges graphs of one
kernel only).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import GRAPH_CLIENT

# The graph's kernel nodes (3, 12 and 5 blocks), behind an empty node: 20 blocks a launch.
GRIDS = ((3, 1, 1), (2, 3, 2), (5, 1, 1))
LAUNCHES = 10

SCRIPT = GRAPH_CLIENT + textwrap.dedent(
    f"""
    exec_ = graph_exec({GRIDS!r}, empty_first=True)
    for _ in range({LAUNCHES}):
        assert cuda.cuGraphLaunch(exec_, None) == 0
    print(settled_blocks())
    """
)


def test_a_graphs_launch_costs_the_blocks_of_all_its_kernel_nodes(claim):
    c = claim().create(cores=50)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=c.env(CARVE_TICK_MS="10"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    per_launch = sum(x * y * z for x, y, z in GRIDS)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == LAUNCHES * per_launch, proc.stderr
