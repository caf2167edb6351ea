"""Fixtures for the memory-enforcement tests (the harness is in enforcement_harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from enforcement_harness import Node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)
