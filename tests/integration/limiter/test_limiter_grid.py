"""A launch is charged every thread block of its grid, all three dimensions, on every launch path.

native/tests/limiter_grid_cuda launches 3-D grids through cuLaunchKernel, cuLaunchCooperativeKernel,
cuLaunchKernelEx (and their per-thread-stream variants), cuLaunchCooperativeKernelMultiDevice and graphs
instantiated every way on a fake GPU with a compute limit, then reads the limiter's own count
(carveLimiterLaunchedBlocks). A limiter that drops a dimension (x*y, the bug a mutation check found
surviving every test, all of which used 1-D grids) under-charges by the others' factor.
"""

from __future__ import annotations

import json

import pytest
from limiter_harness import BUILD

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
