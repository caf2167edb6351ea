"""`carve device-plugin` and `carve scheduler-extender` freeze their start-up heap once started
(driver/heap.py; docs/performance.md, seventh pass), as the DRA plugin does: a full collection of what
start-up left alive (the kubernetes client, gRPC, pydantic) would otherwise land inside a kubelet's
Allocate or a scheduler's filter call. Each command runs as its own process against the API stand-in; the
device plugin registers with the fake kubelet first, since it freezes only once it is serving."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.apiserver_standin import ApiServerStandIn
from support.fake_kubelet import FakeKubelet

REPO = Path(__file__).resolve().parents[3]
# Tens of thousands on a started process; a few hundred is what an interpreter holds before any import.
STARTED_HEAP = 10_000


@pytest.fixture
def standin():
    s = ApiServerStandIn().start()
    try:
        yield s
    finally:
        s.stop()


def run_until(argv: list[str], pattern: str, log: Path, timeout_s: float = 60.0) -> re.Match:
    """Start `python -m driver.cli <argv>`, wait for `pattern` in its log, then stop it with SIGTERM and
    expect a clean exit: the frozen heap must not get in the way of the command's own shutdown."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "driver.cli", *argv],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            found = re.search(pattern, log.read_text(errors="replace"))
            if found or proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert found, f"{argv[0]}: no {pattern!r} in its log:\n{log.read_text(errors='replace')[-3000:]}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text(errors="replace")[-3000:]
        return found
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_started_device_plugin_has_frozen_its_start_up_heap(standin, tmp_path: Path) -> None:
    kubelet = FakeKubelet(
        tmp_path / "device-plugins", tmp_path / "pod-resources" / "kubelet.sock", tmp_path / "cdi"
    )
    kubelet.start()
    try:
        found = run_until(
            [
                "device-plugin",
                "--node-name",
                "node-a",
                "--gpus",
                "fake:1xA100-80GB",
                "--kubeconfig",
                str(standin.kubeconfig(tmp_path / "kubeconfig")),
                "--device-plugin-dir",
                str(tmp_path / "device-plugins"),
                "--pod-resources-socket",
                str(tmp_path / "pod-resources" / "kubelet.sock"),
                "--state-dir",
                str(tmp_path / "state"),
                "--cdi-dir",
                str(tmp_path / "cdi"),
                "--log-level",
                "debug",
            ],
            r"event=device-plugin\.heap-frozen objects=(\d+)",
            tmp_path / "device-plugin.log",
        )
        # Frozen after registering: the kubelet had been told of the plugin before the line was logged.
        assert kubelet.registrations >= 1
    finally:
        kubelet.stop()
    assert int(found.group(1)) > STARTED_HEAP, found.group(0)


def test_a_started_scheduler_extender_has_frozen_its_start_up_heap(standin, tmp_path: Path) -> None:
    found = run_until(
        [
            "scheduler-extender",
            "--kubeconfig",
            str(standin.kubeconfig(tmp_path / "kubeconfig")),
            "--addr",
            "127.0.0.1:0",
            "--log-level",
            "debug",
        ],
        r"event=extender\.heap-frozen objects=(\d+)",
        tmp_path / "extender.log",
    )
    assert int(found.group(1)) > STARTED_HEAP, found.group(0)
