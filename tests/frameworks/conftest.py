"""Fixtures of the framework tests: real CUDA clients on the fake GPUs (tests/support/frameworks.py).

These tests need the framework environment (2.8 GB of CUDA wheels), so `make test` leaves this folder to
`make test-frameworks` (tests/conftest.py's collect_ignore), which builds or reuses that environment and runs
it; `.ci/run` runs both. Run here without CARVE_FRAMEWORKS_PYTHON, every test fails saying so: never a skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.frameworks import CUDART_CLIENT, LIMITER, QUOTA, FrameworksMissing, Tenant, frameworks_python


@pytest.fixture(scope="session")
def frameworks() -> Path:
    try:
        python = frameworks_python()
    except FrameworksMissing as e:
        pytest.fail(str(e))
    missing = [str(p) for p in (LIMITER, CUDART_CLIENT) if not p.exists()]
    if missing:
        pytest.fail(f"native build missing ({', '.join(missing)}): run `make native`")
    return python


@pytest.fixture
def tenant(frameworks, tmp_path: Path):
    """tenant(limiter=True, memory=QUOTA, ...) -> a Tenant on its own fake T4."""

    def make(name: str = "tenant", **kw) -> Tenant:
        kw.setdefault("memory", QUOTA if kw.get("limiter", True) else 0)
        return Tenant(tmp=tmp_path / name, **kw)

    return make
