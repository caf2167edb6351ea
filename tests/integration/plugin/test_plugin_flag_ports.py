"""`--healthz-addr` and `--metrics-addr` take [host]:port with a port of 0 to 65535: one past it is a one-line
usage error naming the flag, before anything starts; 65535 itself passes the check (the plugin then stops at
the next bad flag, which shows that the address was accepted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def run_plugin(node, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "driver.cli", "plugin", *node.args("exclusive"), *extra],
        env=dict(os.environ), cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("flag", ["--healthz-addr", "--metrics-addr"])
def test_a_port_past_65535_is_a_usage_error(node, flag):
    out = run_plugin(node, flag, "127.0.0.1:65536")
    assert out.returncode == 2, out.stderr
    assert f"{flag} '127.0.0.1:65536': expected [host]:port" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--healthz-addr", "--metrics-addr"])
def test_port_65535_passes_the_check(node, flag):
    out = run_plugin(node, flag, ":65535", "--publish-interval", "0")
    assert out.returncode == 2, out.stderr
    assert "--publish-interval" in out.stderr and flag not in out.stderr
