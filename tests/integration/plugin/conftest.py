"""Fixtures for the plugin's process-level tests: plugin processes on the fake node of ../conftest.py."""

from __future__ import annotations

import pytest
from support.mounts import unmount_under
from support.plugin_harness import PluginProcess


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
    unmount_under(node.root)
