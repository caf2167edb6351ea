"""The health endpoint's server thread never keeps the plugin's process alive: a plugin whose main thread
ends without stopping it (a fatal error on the way out) exits, so the kubelet sees it gone and the
DaemonSet restarts it, instead of a process that answers /healthz "ok" while serving nothing."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import sys
from driver.plugin.health.endpoint import HealthServer
e = HealthServer("127.0.0.1:0", lambda: "", lambda: {})
e.start()
print(e.port, flush=True)
sys.stdin.readline()
raise SystemExit(3)  # the main thread ends without e.stop()
"""


def test_a_main_thread_that_ends_without_stopping_the_endpoint_ends_the_process():
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(child.stdout.readline())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert r.status == 200  # it serves while the plugin runs
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=20) == 3
    finally:
        child.kill()
        child.wait()
