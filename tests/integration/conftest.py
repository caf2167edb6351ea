"""Fixtures shared by the process-level tests (plugin, metrics): a fake node and a fake kubelet."""

from __future__ import annotations

import pytest
from support.plugin_harness import FAKE_LIB_READY, FakeNode, Kubelet


@pytest.fixture
def node(tmp_path):
    if not FAKE_LIB_READY:
        pytest.fail("native/build/fakes/libnvidia-ml.so.1 is missing: run `make native` first")
    return FakeNode(tmp_path)


@pytest.fixture
def kubelet(node):
    return Kubelet(node)
