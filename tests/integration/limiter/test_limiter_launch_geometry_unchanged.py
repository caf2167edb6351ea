"""The limiter hands each kernel launch to the driver as the application made it (throttle.c's launch hooks:
the gate counts the launch's blocks, then calls the driver with the same arguments). A launch whose grid or
block dimensions reached the driver in another order would run a different kernel shape: the same number of
blocks, so nothing the limiter counts would change, but a kernel that indexes by blockIdx.y or threadIdx.y
computes garbage.

The launches are captured into a graph on a stream (the fake driver records each captured launch as a kernel
node with its arguments), and the graph's nodes are read back: each has the grid, block and shared memory
it was launched with, through every launch entry point the hooks share a parameter list with, whether the
launch goes straight to the driver (no compute limit: the hooks' fast path) or through the gate."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import GRAPH_CLIENT

GRID, BLOCK, SHARED = (2, 3, 4), (8, 16, 2), 96
ENTRY_POINTS = (
    "cuLaunchKernel",
    "cuLaunchKernel_ptsz",
    "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz",
)
CAPTURE_MODE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED (cuda.h)

SCRIPT = GRAPH_CLIENT + textwrap.dedent(
    f"""
    import json
    stream, graph = ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuStreamCreate(ctypes.byref(stream), 0) == 0
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    # the first launch decides whether launches go through the gate at all: made before the capture
    assert cuda.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, None, None) == 0
    assert cuda.cuStreamSynchronize(stream) == 0
    assert cuda.cuStreamBeginCapture_v2(stream, {CAPTURE_MODE_RELAXED}) == 0
    for name in {ENTRY_POINTS!r}:
        extra = [None] if "Cooperative" not in name else []  # cuLaunchKernel's `extra`; cooperative has none
        rc = getattr(cuda, name)(f, *{GRID!r}, *{BLOCK!r}, {SHARED}, stream, None, *extra)
        assert rc == 0, (name, rc)
    assert cuda.cuStreamEndCapture(stream, ctypes.byref(graph)) == 0
    count = ctypes.c_size_t(16)
    nodes = (ctypes.c_void_p * 16)()
    assert cuda.cuGraphGetNodes(graph, nodes, ctypes.byref(count)) == 0
    seen = []
    for i in range(count.value):
        p = KernelNodeParams()
        assert cuda.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(nodes[i]), ctypes.byref(p)) == 0
        dims = [getattr(p, f"{{a}}Dim{{x}}") for a in ("grid", "block") for x in "XYZ"]
        seen.append([*dims, p.sharedMemBytes])
    print(json.dumps(seen))
    """
)


# no compute limit: launches go straight to the driver; a compute limit: through the gate, which counts them
@pytest.mark.parametrize("cores", [0, 50])
def test_every_launch_reaches_the_driver_with_its_own_geometry(claim, cores: int) -> None:
    c = claim().create(cores=cores)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == [[*GRID, *BLOCK, SHARED]] * len(ENTRY_POINTS), seen
