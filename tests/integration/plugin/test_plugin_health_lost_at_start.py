"""A GPU already lost when the health monitor starts (NVML answers GPU_IS_LOST to its event registration, on
the fake libnvidia-ml.so.1) is unhealthy when start() returns, with the cause `gpu-lost` and its change
reported with the GPUs restored unhealthy from the saved state, before the monitor's first turn: the plugin's
first publish must not offer it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FAKE_NVML = REPO / "native" / "build" / "fakes" / "libnvidia-ml.so.1"

# interval 2 s: the monitor's first turn probes the GPUs only after a 2 s event wait
SNIPPET = f"""
import ctypes, json, sys, time
from pathlib import Path
ctypes.CDLL({str(FAKE_NVML)!r}, mode=ctypes.RTLD_GLOBAL)
import pynvml
from driver.plugin import logfmt
from driver.plugin.health.monitor import STATE_VERSION, HealthMonitor
logfmt.setup("info")
pynvml.nvmlInit()
gpus = [(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)), i) for i in range(2)]
# GPU 0 saved unhealthy by the previous run of the plugin (an XID a minute ago)
Path(sys.argv[1]).write_text(json.dumps({{"version": STATE_VERSION, "unhealthy": {{
    gpus[0][0]: {{"index": 0, "cause": "xid-79", "lastBad": time.time() - 60}}}}}}))
changes = []
m = HealthMonitor(gpus, changes.extend, Path(sys.argv[1]), interval_s=2)
m.start()
now = {{"unhealthy": m.unhealthy(), "changes": [[c.index, c.healthy, c.cause] for c in changes]}}
m.stop()
print(json.dumps(now))
"""


def test_a_gpu_lost_before_the_monitor_starts_is_unhealthy_when_start_returns(tmp_path):
    assert FAKE_NVML.exists(), "run `make native`"
    lost = tmp_path / "lost"
    lost.write_text("1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARVE_FAKE_")}
    env.update(CARVE_FAKE_GPUS="2xA100-80GB", CARVE_FAKE_SEED="node-a", CARVE_FAKE_LOST_FILE=str(lost))
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SNIPPET), str(tmp_path / "health.json")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {
        "unhealthy": {"0": "xid-79", "1": "gpu-lost"},
        "changes": [[0, False, "xid-79"], [1, False, "gpu-lost"]],  # the restored one and the lost one
    }
    assert "event=health.register-failed" in r.stderr and "error=lost" in r.stderr
