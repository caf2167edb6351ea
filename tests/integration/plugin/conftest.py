"""Fixtures for the plugin's process-level tests: plugin processes on the fake node of ../conftest.py."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from support.plugin_harness import PluginProcess


def unmount_under(root: Path) -> None:
    """Lazily unmount what a plugin left mounted under `root` (the regions' tmpfs of claims a test did not
    unprepare: driver/plugin/container/regionfs.py), deepest first."""
    prefix = str(Path(root).resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            points.append(point)
    libc = ctypes.CDLL(None, use_errno=True)
    for point in sorted(points, key=len, reverse=True):
        libc.umount2(os.fsencode(point), 2)  # MNT_DETACH


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
