"""Fixtures for the memory-enforcement tests (the harness is in enforcement_harness.py)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from enforcement_harness import MPS_CONTROL, Node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


@pytest.fixture
def daemon(node: Node) -> Iterator[Path]:
    """A fake MPS control daemon (started with -d, as the plugin does); its pipe directory."""
    # A short path (a unix socket path has at most 107 bytes) that every user can traverse, as the
    # plugin's pipe directory is for the pods of every uid.
    pipe = Path(tempfile.mkdtemp(prefix="carve-mps-"))
    pipe.chmod(0o755)
    env = node.env(CUDA_MPS_PIPE_DIRECTORY=str(pipe), CUDA_MPS_LOG_DIRECTORY=str(node.tmp / "mps-log"))
    proc = subprocess.run([str(MPS_CONTROL), "-d"], env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    try:
        yield pipe
    finally:
        node.mps("quit", pipe=pipe)
        shutil.rmtree(pipe, ignore_errors=True)
