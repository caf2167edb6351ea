"""A graph is charged the blocks of its kernel nodes, read when it is instantiated into a list the limiter
allocates (throttle.c, graph_blocks). When that allocation fails (the address space exhausted), the graph is
charged one block, as one the limiter cannot count, and runs: the limiter never reads the list it did not get.

native/tests/preload/fail_calloc.c, preloaded before the limiter, fails the one calloc of the list's shape
(one CUgraphNode pointer per node of a graph of 4,099 nodes) and allocates every other."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import BUILD, GRAPH_CLIENT, LIMITER

FAIL_CALLOC = BUILD / "tests" / "libfail_calloc.so"
NODES = 4_099  # a count nothing else in the process callocs

SCRIPT = GRAPH_CLIENT + textwrap.dedent(
    f"""
    import json
    exec_ = graph_exec([(1, 1, 1)] * {NODES})
    before = settled_blocks()
    assert cuda.cuGraphLaunch(exec_, None) == 0
    print(json.dumps({{"charged": settled_blocks() - before}}))
    """
)


def charged(c, **env: str) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=c.env(CARVE_TICK_MS="10", LD_PRELOAD=f"{FAIL_CALLOC} {LIMITER}", **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])["charged"]


def test_a_graph_whose_node_list_cannot_be_allocated_is_charged_one_block(claim) -> None:
    c = claim().create(cores=50)
    assert charged(c) == NODES  # the list allocated: every node's block
    assert charged(c, CARVE_TEST_FAIL_CALLOC=f"{NODES}x8") == 1
