"""The probe endpoint of the legacy device plugin and the extender: /metrics, /healthz, /readyz."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry, Counter

from driver.metrics.probes import ProbeServer


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_probe_server_serves_metrics_health_and_readiness() -> None:
    registry = CollectorRegistry()
    calls = Counter("carve_test_calls", "calls", ["method"], registry=registry)
    calls.labels("Allocate").inc()
    why = ["first list of pods pending"]
    server = ProbeServer("127.0.0.1:0", registry, lambda: why[0])
    server.start()
    try:
        code, body = _get(server.port, "/metrics")
        assert code == 200 and 'carve_test_calls_total{method="Allocate"} 1.0' in body
        assert _get(server.port, "/healthz") == (200, "ok")
        assert _get(server.port, "/readyz") == (503, "first list of pods pending")
        why[0] = ""
        assert _get(server.port, "/readyz") == (200, "ok")
        assert _get(server.port, "/bind")[0] == 404
    finally:
        server.stop()
