"""Fixtures for tests of the fake GPU libraries (native/fakes) through pynvml and ctypes.

The fakes read CARVE_FAKE_GPUS once per process, so every scenario runs in a fresh Python subprocess with
its own environment; the snippet prints one JSON document as its last line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes_support import FAKE_NVML, NATIVE, PRELUDE


@pytest.fixture(scope="session")
def fake_nvml() -> Path:
    """The fake libnvidia-ml.so.1, brought up to date (make is incremental; only this target is built)."""
    target = FAKE_NVML.relative_to(NATIVE)
    proc = subprocess.run(["make", "-C", str(NATIVE), f"PYTHON={sys.executable}", str(target)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"building the fake NVML failed:\n{proc.stdout}\n{proc.stderr}"
    return FAKE_NVML


FakeRun = Callable[..., Any]


@pytest.fixture
def fake_run(fake_nvml: Path, tmp_path: Path) -> FakeRun:
    """Run a snippet against the fake: fake_run(code, gpus="1xA100-80GB", state=None, seed="node-a", **env).

    Returns the JSON of the snippet's last output line; raises with its stderr when it fails.
    """

    def run(code: str, gpus: str = "1xA100-80GB", state: Path | str | None = None,
            seed: str | None = "node-a", expect_fail: bool = False, **extra: str) -> Any:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_FAKE_") and k != "NODE_NAME"}
        env["CARVE_FAKE_GPUS"] = gpus
        if state is not None:
            env["CARVE_FAKE_STATE"] = str(state)
        if seed is not None:
            env["CARVE_FAKE_SEED"] = seed
        env.update(extra)
        proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env,
                              capture_output=True, text=True, timeout=60)
        if expect_fail:
            return proc
        if proc.returncode != 0:
            raise AssertionError(f"snippet failed ({proc.returncode}):\n{proc.stderr}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run


@pytest.fixture
def state_file(tmp_path: Path) -> Path:
    return tmp_path / "fake-gpu.state"

