"""The health file's version is a JSON number compared by value: a file whose version reads 1.0 (the same
number as 1, as a tool that rewrites JSON numbers as floats writes it) is restored like carve's own `1`;
any other version (2, the string "1", none) is refused, logged and the file written anew with no GPU
unhealthy (docs/health.md: `<plugin-dir>/health.json`, version 1)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from driver.plugin.health.monitor import STATE_VERSION, HealthMonitor


def _monitor(state: Path, version: object) -> HealthMonitor:
    body = {"unhealthy": {"GPU-0": {"index": 0, "cause": "XID 79", "lastBad": 1000.0}}}
    if version is not None:
        body["version"] = version
    state.write_text(json.dumps(body))
    return HealthMonitor([("GPU-0", 0), ("GPU-1", 1)], lambda changes: None, state, clock=lambda: 5000.0)


@pytest.mark.parametrize("version", [STATE_VERSION, float(STATE_VERSION)])
def test_the_version_one_is_restored_whatever_its_json_spelling(tmp_path: Path, version: object) -> None:
    state = tmp_path / "health.json"
    monitor = _monitor(state, version)
    assert len(monitor._load()) == 1  # what start() does first: one change, GPU-0 unhealthy
    assert monitor.unhealthy() == {0: "XID 79"}


@pytest.mark.parametrize("version", [STATE_VERSION + 1, str(STATE_VERSION), None])
def test_another_version_is_refused_and_the_file_written_anew(
    tmp_path: Path, version: object, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "health.json"
    monitor = _monitor(state, version)
    with caplog.at_level(logging.WARNING):
        assert monitor._load() == []
    assert monitor.unhealthy() == {}
    assert [r.getMessage() for r in caplog.records] == ["health.state-version"]
    assert json.loads(state.read_text()) == {"version": STATE_VERSION, "unhealthy": {}}
