"""Fixtures of the legacy shim's process-level tests: one in-process node with the fake kubelet."""

from __future__ import annotations

import pytest
from support.legacy_node import LegacyNode


@pytest.fixture
def legacy():
    node = LegacyNode()
    yield node
    node.close()
