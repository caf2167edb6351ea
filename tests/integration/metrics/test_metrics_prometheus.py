"""The e2e's Prometheus runner (e2e/cluster/prometheus.py) with the real binary (Debian's `prometheus`, which
`make test` installs), on the controller's exporter alone: no cluster. Its event series exist at 0 from the
start, so the dashboard's "Strategy changes" query returns one 0 per strategy before any change; and a
missing binary is an error that names the package."""

from __future__ import annotations

import time

import pytest
from support.dashboard import panel_queries

from api.v1alpha1.partitioning import STRATEGY_NAMES
from driver.controller.metrics import ControllerMetrics
from driver.metrics.exporter import MetricsServer
from e2e.cluster import prometheus as runner
from e2e.cluster.procs import StartError, Supervisor


def test_a_missing_prometheus_is_an_error_naming_the_package(monkeypatch):
    monkeypatch.setattr(runner.shutil, "which", lambda _name: None)
    with pytest.raises(StartError, match=r"make test-deps.*Debian's `prometheus` package"):
        runner.binary()


def test_the_config_scrapes_every_second_keeping_carves_pod_labels(tmp_path):
    targets = [
        runner.Target("carve-plugin", "127.0.0.1:1", {"node": "n1"}),
        runner.Target("carve-plugin", "127.0.0.1:2", {"node": "n2"}),
        runner.Target("carve-controller", "127.0.0.1:3"),
    ]
    config = runner.config(targets, [tmp_path / "rules.yaml"])
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert config["rule_files"] == [str(tmp_path / "rules.yaml")]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"carve-plugin", "carve-controller"}
    assert all(j["honor_labels"] for j in jobs.values())
    assert jobs["carve-plugin"]["static_configs"] == [
        {"targets": ["127.0.0.1:1"], "labels": {"node": "n1"}},
        {"targets": ["127.0.0.1:2"], "labels": {"node": "n2"}},
    ]


def test_a_real_prometheus_sees_every_strategy_change_series_at_zero(tmp_path):
    runner.binary()  # fails the test, naming the package, where prometheus is missing
    metrics = ControllerMetrics()
    server = MetricsServer("127.0.0.1:0", metrics.registry)
    server.start()
    (tmp_path / "logs").mkdir()
    sup = Supervisor(tmp_path / "logs")
    prom = runner.Prometheus(tmp_path / "prometheus", sup)
    try:
        prom.start([runner.Target("carve-controller", f"127.0.0.1:{server.port}")])
        (changes,) = [q for q in panel_queries() if q.panel == "Strategy changes"]
        deadline = time.monotonic() + 30
        while not (answer := prom.query(changes.promql)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert {s["metric"]["strategy"]: float(s["value"][1]) for s in answer} == dict.fromkeys(
            STRATEGY_NAMES, 0
        )
        with pytest.raises(AssertionError, match="parse error"):
            prom.query("sum by (le (x)")
    finally:
        sup.stop_all()
        server.stop()
