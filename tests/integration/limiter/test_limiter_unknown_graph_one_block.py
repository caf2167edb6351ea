"""A graph launch the limiter has no record of is charged one block (throttle.c, exec_blocks: a graph it did
not see instantiated still runs, and the feedback loop measures its time), also when its lookup goes on to
the overflow list, which holds the records past the table's 65,536 slots.

Here the process holds more live buffers than the table, so a lookup that misses the table searches the
list; the graph is launched once known (its 24 blocks are charged), then destroyed and launched again, as a
stale handle would be: the driver refuses it, and the limiter charged one block for it, not what its record
said, nor an answer the list never gave."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import GRAPH_CLIENT

MIB = 1 << 20
LIVE = 70_000  # past the table's 65,536 slots: records spill onto the overflow list
GRID = (4, 3, 2)

SCRIPT = GRAPH_CLIENT + textwrap.dedent(
    f"""
    import json
    p, size = ctypes.c_uint64(), ctypes.c_size_t(4096)
    for _ in range({LIVE}):
        assert cuda.cuMemAlloc_v2(ctypes.byref(p), size) == 0
    exec_ = graph_exec([{GRID!r}])
    assert cuda.cuGraphLaunch(exec_, None) == 0
    known = settled_blocks()
    assert cuda.cuGraphExecDestroy(exec_) == 0
    refused = cuda.cuGraphLaunch(exec_, None)
    print(json.dumps({{"known": known, "stale": settled_blocks() - known, "refused": refused}}))
    """
)


def test_a_graph_the_limiter_has_no_record_of_costs_one_block(claim) -> None:
    c = claim(gpus="1xA100-80GB").create(memory=60 * 1024 * MIB, cores=50)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=c.env(CARVE_TICK_MS="10"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["refused"] != 0, out  # a destroyed graph: the driver's error
    assert out["known"] == 24 and out["stale"] == 1, out
