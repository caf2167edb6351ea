"""Fixtures for the limiter's integration tests (the harness itself is in limiter_harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from limiter_harness import Claim, require_native


@pytest.fixture
def claim(tmp_path: Path):
    require_native()

    def make(name: str = "claim", **kw) -> Claim:
        d = tmp_path / name
        d.mkdir(exist_ok=True)
        kw.setdefault("state", tmp_path / "fake.state")
        return Claim(tmp=d, **kw)

    return make
