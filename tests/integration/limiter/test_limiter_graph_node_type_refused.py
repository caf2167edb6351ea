"""A graph node whose type the driver fails to tell is not charged as a kernel, whatever the failed call left
in its output.

To count a graph's blocks the limiter asks the driver each node's type (cuGraphNodeGetType) and reads the
grid of the kernel nodes. The outputs of a CUDA call that fails are undefined: the refusing test driver
(native/tests/refusing/refusing_cuda.c, REFUSING_CUDA_NODE_TYPE) fails the call after the fake has written
the real type, so a limiter that read the type without checking the result would take the node for the
8-block kernel it is. One that checks counts no kernel it can trust, and charges the graph one block a
launch, as a graph with no kernel (test_limiter_grid.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import BUILD, FAKES, GRAPH_CLIENT

REFUSING = BUILD / "refusing"
LAUNCHES = 10
CUDA_ERROR_UNKNOWN = 999

SCRIPT = GRAPH_CLIENT + textwrap.dedent(
    f"""
    import json
    cuda.refusingCudaRefusals.restype = ctypes.c_uint64
    exec_ = graph_exec([(8, 1, 1)])
    for _ in range({LAUNCHES}):
        assert cuda.cuGraphLaunch(exec_, None) == 0
    print(json.dumps({{"charged": settled_blocks(), "refused": cuda.refusingCudaRefusals()}}))
    """
)


def test_a_node_whose_type_the_driver_fails_to_tell_is_not_charged_as_a_kernel(claim):
    c = claim().create(cores=50)
    env = c.env(
        CARVE_TICK_MS="10",
        LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}",
        REFUSING_CUDA_NODE_TYPE=str(CUDA_ERROR_UNKNOWN),
    )
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["refused"] >= 1, out  # the limiter asked, and the driver failed the call
    assert out["charged"] == LAUNCHES, out  # one block a launch, not the kernel's 8
