"""The monitor's `health.started` log line says how many GPUs it watches and, when a GPU is unhealthy
from the start (remembered in the health file), which ones and why; with every GPU healthy the line has no
`unhealthy` field at all."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from driver.plugin.health.monitor import STATE_FILE, STATE_VERSION, HealthMonitor


def _started(tmp_path: Path, unhealthy: dict, caplog: pytest.LogCaptureFixture) -> dict:
    state = tmp_path / STATE_FILE
    state.write_text(json.dumps({"version": STATE_VERSION, "unhealthy": unhealthy}))
    monitor = HealthMonitor([("GPU-0", 0), ("GPU-1", 1)], lambda changes: None, state, interval_s=60.0)
    with caplog.at_level(logging.INFO):
        monitor.start()
    monitor.stop()
    (record,) = [r for r in caplog.records if r.getMessage() == "health.started"]
    return record.fields


def test_the_started_line_names_the_gpus_unhealthy_from_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fields = _started(tmp_path, {"GPU-1": {"index": 1, "cause": "XID 79", "lastBad": None}}, caplog)
    assert fields == {"gpus": 2, "unhealthy": {1: "XID 79"}}


def test_with_every_gpu_healthy_the_line_has_no_unhealthy_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fields = _started(tmp_path, {}, caplog)
    assert fields == {"gpus": 2, "unhealthy": None}  # None: logfmt leaves the field out
