"""Fixtures for the plugin's process-level tests: a fake node in temp dirs and a fake kubelet."""

from __future__ import annotations

import pytest
from support.plugin_harness import FAKE_LIB_READY, FakeNode, Kubelet, PluginProcess


@pytest.fixture
def node(tmp_path):
    if not FAKE_LIB_READY:
        pytest.fail("native/build/fakes/libnvidia-ml.so.1 is missing: run `make native` first")
    return FakeNode(tmp_path)


@pytest.fixture
def kubelet(node):
    return Kubelet(node)


@pytest.fixture
def plugin_factory(node):
    started: list[PluginProcess] = []

    def start(strategy: str = "0=mig,1=soft,exclusive", env: dict | None = None, extra: tuple = ()):
        p = PluginProcess(node, strategy, env, extra).start()
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
