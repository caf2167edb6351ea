"""Fixtures shared by every test: where the native build lives and an environment of fake GPUs.

Component-specific fixtures live in the conftest.py of that component's test folder. Helpers that several
folders need live in tests/support/ and are imported as `support.<module>`: pytest puts this folder (tests/)
on sys.path when it loads this file, for every test under it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.apiserver_standin import ApiServerStandIn
from support.mounts import unmount_under

REPO = Path(__file__).resolve().parents[1]
# tests/frameworks runs real CUDA clients from the framework environment (2.8 GB of wheels, built and cached
# by `make test-frameworks`, which sets CARVE_FRAMEWORKS_PYTHON): collected only there, so a plain
# `pytest tests` neither builds it nor reports those tests as skipped. `.ci/run` runs both targets.
# The same for the benchmark that drives them (tests/benchmarks/test_limiter_frameworks.py): `make bench`.
NEEDS_FRAMEWORKS = ["frameworks", "benchmarks/test_limiter_frameworks.py"]
collect_ignore = [] if os.environ.get("CARVE_FRAMEWORKS_PYTHON") else NEEDS_FRAMEWORKS
NATIVE_BUILD = REPO / "native" / "build"
FAKE_LIB_DIR = NATIVE_BUILD / "fakes"
LIMITER_LIB = NATIVE_BUILD / "libcarve-limiter.so"


@pytest.fixture
def fake_gpu_env(tmp_path: Path):
    """Returns a function building the environment of a process that sees fake GPUs.

    `fake_gpu_env("2xA100-80GB,1xT4")` -> dict for subprocess env: topology, seed, a state file in
    tmp_path (so MIG instances and memory survive between processes of one test) and LD_LIBRARY_PATH
    pointing at the fake libnvidia-ml.so.1 / libcuda.so.1.
    """

    def build(gpus: str = "2xA100-80GB,1xT4", seed: str = "test-node", state: Path | None = None) -> dict:
        env = dict(os.environ)
        env.update(
            CARVE_FAKE_GPUS=gpus,
            CARVE_FAKE_SEED=seed,
            CARVE_FAKE_STATE=str(state or tmp_path / "fake-gpus.state"),
            LD_LIBRARY_PATH=os.pathsep.join(
                filter(None, [str(FAKE_LIB_DIR), os.environ.get("LD_LIBRARY_PATH")])
            ),
        )
        return env

    return build


@pytest.fixture
def apiserver() -> Iterator[ApiServerStandIn]:
    """A started stand-in of the API server (tests/support/apiserver_standin.py), stopped after the test."""
    with ApiServerStandIn() as server:
        yield server


@pytest.fixture(scope="session")
def stub_cache(tmp_path_factory) -> Path:
    """Where tests/support/driverroot.py keeps the stub driver libraries it compiles (once per session)."""
    return tmp_path_factory.mktemp("driver-stubs")


@pytest.fixture(scope="session", autouse=True)
def unmount_region_filesystems(tmp_path_factory) -> Iterator[None]:
    """At the end of the session, the regions' tmpfs mounts that tests left (a plugin run as root mounts one
    per prepared claim; tests that do not unprepare leave them): pytest's cleanup of old runs cannot remove
    a mount point."""
    yield
    if os.geteuid() == 0:
        base = tmp_path_factory.getbasetemp()
        unmount_under(base)
        for old in base.parent.glob("garbage-*"):  # earlier runs pytest could not remove (never a live run's)
            unmount_under(old)
