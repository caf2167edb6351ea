"""When the feedback thread cannot be started, the limiter says so and treats the process as one without a
compute limit (feedback.c, carve_gate_decide: `pthread_create(...) != 0`). pthread_create answers 0 or an
error number (EAGAIN where the process is out of threads); nothing would then measure or refill the claim's
launch budget, so the gates must not be switched on: the error is logged once and launches go straight to
the driver.

A library built here and preloaded after the limiter answers EAGAIN to every pthread_create (the client
starts no thread of its own); the client launches kernels on a claim with a forced compute limit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from limiter_harness import LIMITER

# pthread_create refused as a process at its thread limit is (EAGAIN)
NO_THREADS = """
#include <errno.h>
#include <pthread.h>

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    (void)thread;
    (void)attr;
    (void)start;
    (void)arg;
    return EAGAIN;
}
"""

REFUSED = "cannot start the feedback thread: compute limits are not enforced"


@pytest.fixture
def no_threads(tmp_path: Path) -> Path:
    source = tmp_path / "no_threads.c"
    source.write_text(NO_THREADS)
    library = tmp_path / "libno_threads.so"
    built = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(source)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    return library


def test_a_refused_feedback_thread_is_logged_and_no_launch_waits_for_it(claim, no_threads: Path) -> None:
    c = claim().create(cores=10, core_policy="force")
    # 0.5 s of 1 ms kernels: throttled to 10% without a thread to refill the budget, the first tick's
    # switch-on would never come, so the launches run as they would without a limit
    out = c.run("launch", "0.5", "64", "1000000", LD_PRELOAD=f"{LIMITER} {no_threads}", CARVE_TICK_MS="20")
    assert out.stderr.count(REFUSED) == 1, out.stderr
    windows = json.loads(out.stdout)["windows"]
    assert windows, out.stdout
