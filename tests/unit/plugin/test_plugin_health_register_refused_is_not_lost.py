"""A GPU whose XID event registration NVML refuses for another reason than a lost GPU (NOT_SUPPORTED, as some
GPUs and vGPU guests answer) is not marked unhealthy at start (driver/plugin/health/monitor.py, `start`): the
refusal is logged and the level probes still watch the GPU; only GPU_IS_LOST marks it `gpu-lost`. The real
event set (driver/gpu/events.py) runs over pynvml's calls, answered here as the driver would."""

from __future__ import annotations

import logging
import time

import pynvml
import pytest

from driver.gpu import events
from driver.plugin.health.monitor import HealthMonitor

REFUSED = {"GPU-0": pynvml.NVML_ERROR_NOT_SUPPORTED, "GPU-1": pynvml.NVML_ERROR_GPU_IS_LOST}


def _register(handle: str, mask: int, event_set: object) -> None:
    if handle in REFUSED:
        raise pynvml.NVMLError(REFUSED[handle])


def _wait(event_set: object, timeout_ms: int) -> None:
    time.sleep(timeout_ms / 1000)  # no XID: the wait times out, as NVML's does
    raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)


@pytest.fixture
def nvml(monkeypatch) -> None:
    monkeypatch.setattr(pynvml, "nvmlEventSetCreate", lambda: object())
    monkeypatch.setattr(pynvml, "nvmlEventSetFree", lambda event_set: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByUUID", lambda uuid: uuid)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetSupportedEventTypes", lambda handle: events.EVENT_MASK)
    monkeypatch.setattr(pynvml, "nvmlDeviceRegisterEvents", _register)
    monkeypatch.setattr(pynvml, "nvmlEventSetWait_v2", _wait)
    monkeypatch.setattr(events, "probe", lambda uuid: events.Signals())


def test_only_a_lost_gpu_is_unhealthy_after_a_refused_registration(nvml, tmp_path, caplog) -> None:
    gpus = [("GPU-0", 0), ("GPU-1", 1), ("GPU-2", 2)]
    monitor = HealthMonitor(gpus, lambda changes: None, tmp_path / "health.json", interval_s=0.05)
    with caplog.at_level(logging.WARNING):
        monitor.start()
    try:
        assert monitor.unhealthy() == {1: "gpu-lost"}
    finally:
        monitor.stop()
    refused = {
        r.fields["gpu"]: r.fields["error"]
        for r in caplog.records
        if r.getMessage() == "health.register-failed"
    }
    assert refused["GPU-1"] == "lost"
    assert refused["GPU-0"].startswith("NVMLError_NotSupported"), refused
