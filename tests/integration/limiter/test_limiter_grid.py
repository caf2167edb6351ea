"""A launch is charged every thread block of its grid, all three dimensions, on every launch path.

native/tests/limiter_grid_cuda launches 3-D grids through cuLaunchKernel, cuLaunchCooperativeKernel,
cuLaunchKernelEx (and their per-thread-stream variants), cuLaunchCooperativeKernelMultiDevice and graphs
instantiated every way on a fake GPU with a compute limit, then reads the limiter's own count
(carveLimiterLaunchedBlocks). A limiter that drops a dimension (x*y, the bug a mutation check found
surviving every test, all of which used 1-D grids) under-charges by the others' factor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import BUILD, LIMITER, write_claim

from driver.limits import ClaimLimits, DeviceLimit

GRID = BUILD / "tests" / "limiter_grid_cuda"


@pytest.mark.parametrize("grid", [(3, 5, 7), (1, 1, 9), (4, 1, 1), (2, 6, 1)])
def test_every_grid_dimension_is_charged(claim, grid):
    if not GRID.exists():
        pytest.fail(f"{GRID} missing: run `make native`")
    c = claim(gpus="1xA100-80GB").create(cores=50)
    x, y, z = grid
    out = json.loads(c.run(*map(str, grid), "10", program=GRID).stdout.strip().splitlines()[-1])
    assert out["expected"] == 11 * 10 * x * y * z
    assert out["charged"] == out["expected"], out


LAUNCHES = textwrap.dedent(
    f"""
    import ctypes, json, time
    cuda = ctypes.CDLL("libcuda.so.1")
    limiter = ctypes.CDLL({str(LIMITER)!r})
    limiter.carveLimiterLaunchedBlocks.restype = ctypes.c_uint64
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    assert cuda.cuInit(0) == 0
    def on(ordinal):
        ctx, dev = ctypes.c_void_p(), ctypes.c_int()
        assert cuda.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
        assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    # the unlimited GPU first: its launches come before the feedback thread's first tick
    for ordinal in (1, 0):
        on(ordinal)
        for _ in range(10):
            assert cuda.cuLaunchKernel(f, 8, 1, 1, 32, 1, 1, 0, None, None, None) == 0
    cuda.cuCtxSynchronize()
    for _ in range(200):  # the thread folds device 0's launches into its count at a tick
        if limiter.carveLimiterLaunchedBlocks(0) >= 80:
            break
        time.sleep(0.01)
    print(json.dumps([limiter.carveLimiterLaunchedBlocks(0), limiter.carveLimiterLaunchedBlocks(1)]))
    """
)


def test_a_gpu_without_a_compute_limit_counts_no_launches(claim):
    # carveLimiterLaunchedBlocks: "0 when compute is not limited", even for launches made before the
    # feedback thread's first tick, while another GPU of the process is limited
    c = claim(gpus="2xT4")
    limits = ClaimLimits(devices=(DeviceLimit(0, 50), DeviceLimit(0, 0)), region_path=str(c.region))
    write_claim(c.region, limits)
    env = c.env(CARVE_TICK_MS="10")
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCHES], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [80, 0]


EMPTY_GRAPHS = textwrap.dedent(
    f"""
    import ctypes, json, time
    cuda = ctypes.CDLL("libcuda.so.1")
    limiter = ctypes.CDLL({str(LIMITER)!r})
    limiter.carveLimiterLaunchedBlocks.restype = ctypes.c_uint64
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    def instantiated(nodes):
        graph, node, exec_ = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        assert cuda.cuGraphCreate(ctypes.byref(graph), 0) == 0
        for _ in range(nodes):
            assert cuda.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, ctypes.c_size_t(0)) == 0
        assert cuda.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, ctypes.c_ulonglong(0)) == 0
        return exec_
    for exec_ in (instantiated(0), instantiated(2)):
        for _ in range(10):
            assert cuda.cuGraphLaunch(exec_, None) == 0
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1000)))
    assert cuda.cuLaunchKernel(f, 8, 1, 1, 32, 1, 1, 0, None, None, None) == 0
    cuda.cuCtxSynchronize()
    last, still = -1, 0
    while still < 20:  # the feedback thread folds the launches into its count at its ticks
        now = limiter.carveLimiterLaunchedBlocks(0)
        still = still + 1 if now == last else 0
        last = now
        time.sleep(0.01)
    print(json.dumps(last))
    """
)


def test_a_graph_without_kernels_costs_one_block(claim):
    # a graph with no kernel node (none at all, or two empty nodes) is charged one block a launch, as a graph
    # instantiated before the limiter saw it: ten launches of each and one kernel of 8 blocks are 28
    c = claim().create(cores=50)
    proc = subprocess.run(
        [sys.executable, "-c", EMPTY_GRAPHS],
        env=c.env(CARVE_TICK_MS="10"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == 28, proc.stderr
