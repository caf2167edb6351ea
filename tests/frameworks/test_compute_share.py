"""A 30% compute share holds for real clients' launch loops, within 2 points: the cudart program's launches
(the fake's kernel through the cuLaunchKernel cudart resolved) and a graph it captured from a stream and
replays (cudaGraphLaunch), on cudart 12 and 13; PyTorch's plain launches and a CUDA graph replayed
(cuGraphLaunch); CuPy's NVRTC-compiled kernels, measured by the fake GPU's own clock
(native/fakes/common/kernels.c), not by the limiter. The same loop without the limiter takes the whole GPU.

All loops run at once, each on its own fake GPU, so the module pays the measurement window once.
"""

from __future__ import annotations

import pytest
from support.frameworks import Tenant, answer

SECONDS = 5
SHARE = 30
TOLERANCE = 2
GRID = "80"  # two waves on the fake T4's 40 SMs
# name: (client, arguments after the seconds, limited)
LOOPS = {
    "cudart12_launch": ("cudart12", ("launch",), True),
    "cudart13_launch": ("cudart13", ("launch",), True),
    "cudart12_graph": ("cudart12", ("graph",), True),
    "cudart13_graph": ("cudart13", ("graph",), True),
    "torch_launch": ("torch", ("launch",), True),
    "torch_graph": ("torch", ("graph",), True),
    "cupy_launch": ("cupy", ("launch",), True),
    "torch_launch_alone": ("torch", ("launch",), False),
}


@pytest.fixture(scope="module")
def loops(frameworks, tmp_path_factory):
    root = tmp_path_factory.mktemp("share")
    procs = {}
    for name, (client, cmd, limited) in LOOPS.items():
        t = Tenant(tmp=root / name, cores=SHARE if limited else 0, limiter=limited)
        grid = (GRID,) if client.startswith("cudart") else ()
        procs[name] = (client, t.popen(client, *cmd, str(SECONDS), *grid))
    results, failures = {}, {}
    for name, (client, proc) in procs.items():
        try:
            results[name] = answer(client, proc, timeout=180)
        except AssertionError as e:
            failures[name] = str(e)
    return results, failures


def _result(loops, name: str) -> dict:
    results, failures = loops
    if name in failures:
        pytest.fail(failures[name])
    return results[name]


@pytest.mark.parametrize("name", [n for n, (_, _, limited) in LOOPS.items() if limited])
def test_framework_loop_holds_a_30_percent_share_within_2_points(loops, name):
    out = _result(loops, name)
    assert out["steps"] > 0, out
    assert abs(out["occupancy"] - SHARE) <= TOLERANCE, out


def test_the_same_loop_without_the_limiter_takes_the_gpu(loops):
    out = _result(loops, "torch_launch_alone")
    assert out["occupancy"] >= 80, out  # so the share above is the limiter's doing
