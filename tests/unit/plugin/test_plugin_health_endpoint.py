"""The plugin's HTTP endpoint: /healthz answers ok or the problem (503), /status the plugin's state as
indented JSON on a line of its own, anything else 404 (a survivor of generated mutants in
driver/plugin/health/endpoint.py: no test read /status)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from driver.plugin.health.endpoint import HealthServer


@pytest.fixture
def served():
    state = {"problem": "", "status": {"claims": 2, "gpus": ["GPU-0"]}}
    server = HealthServer("127.0.0.1:0", lambda: state["problem"], lambda: state["status"])
    server.start()
    yield state, f"http://127.0.0.1:{server.port}"
    server.stop()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_status_is_the_plugins_state_as_json_and_healthz_its_problem(served):
    state, base = served
    code, kind, body = _get(f"{base}/status")
    assert (code, kind) == (200, "application/json")
    assert body.endswith("}\n") and json.loads(body) == state["status"]
    assert body == json.dumps(state["status"], indent=2) + "\n"
    assert _get(f"{base}/healthz") == (200, "text/plain", "ok\n")
    state["problem"] = "dra socket /x: UNAVAILABLE: gone"
    assert _get(f"{base}/healthz") == (503, "text/plain", "dra socket /x: UNAVAILABLE: gone\n")
    assert _get(f"{base}/metrics") == (404, "text/plain", "not found\n")
