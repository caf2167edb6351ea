"""A claim that stops launching is written as idle: its utilization falls to 0 once NVML has no samples for
the GPU (feedback.c, measure: `nvmlDeviceGetProcessUtilization` answering NVML_ERROR_NOT_FOUND, "no samples
since lastSeenTimeStamp", is a fresh measurement of nothing when the claim launched nothing in the tick; it
is no measurement at all when it did launch, since the driver may not have sampled those kernels yet). The
plugin reads the utilization from the region; a claim that went idle must not keep showing the busy value
of its last samples.

The fake NVML first answers a fixed list naming the process at 60% (`CARVE_FAKE_UTIL_FILE`), written by the
process itself once it knows its pid; then the list is emptied and the fake's model answers: the one kernel
the process launched (1 ns, to start the limiter's feedback thread) ended long before, so it has no samples:
NOT_FOUND at every tick while the process waits."""

from __future__ import annotations

import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from limiter_harness import CUDA_CONTEXT, python_client

from driver.limits import Region

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    """
    import os, sys
    with open(os.environ["SAMPLES"], "w") as samples:
        samples.write(f"0 {os.getpid()} 60\\n")  # NVML's samples name this process at 60%
    cuda.carveFakeKernel.restype = ctypes.c_void_p
    f = ctypes.c_void_p(cuda.carveFakeKernel(ctypes.c_uint64(1)))
    assert cuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0  # starts the feedback thread
    print("launched", flush=True)
    sys.stdin.read()  # idle, launching nothing, until the test closes stdin
    """
)


def wait_for_utilization(region: Path, client: subprocess.Popen, wanted: Callable[[int], bool]) -> int:
    """The claim's utilization once `wanted` holds for it, or the last value read after 30 s (ticks are
    20 ms apart: a value that never comes is the failure, not a slow one)."""
    deadline = time.monotonic() + 30
    while True:
        assert client.poll() is None, "the client ended early"
        with Region.open(region) as r:
            value = r.utilization(0)
        if wanted(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def test_a_claim_that_stops_launching_is_written_as_idle(claim, tmp_path: Path) -> None:
    c = claim().create(cores=50)
    samples = tmp_path / "samples"
    env = c.env(CARVE_FAKE_UTIL_FILE=str(samples), SAMPLES=str(samples), CARVE_TICK_MS="20")
    client = python_client(SCRIPT, env)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "launched"
        busy = wait_for_utilization(c.region, client, lambda u: u == 60)
        assert busy == 60  # the fixed list is read at the ticks
        samples.write_text("")  # the model answers from now on: no samples since the last tick
        idle = wait_for_utilization(c.region, client, lambda u: u != 60)
        out, err = client.communicate("", timeout=60)
    finally:
        client.kill()
    assert client.returncode == 0, err
    assert out == "", out  # nothing after "launched": it waited, launching nothing
    assert idle == 0, err
