"""A GPU that cannot run what its rule gives falls back, and the `strategy.fallback` log line names the rule
that gave the strategy it could not run (the rule's own text, as the StrategyFallback Event does), or
`(built-in default)` where no rule gave it (the publisher announces a MIG mode's fallback with the rule it
recorded, "" for none): an operator reading the plugin's log finds which `--strategy` item to change."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from driver.cluster import LocalCluster
from driver.devices.catalog import fake_node
from driver.metrics import PluginMetrics
from driver.metrics.collector import PluginState
from driver.plugin.strategies import NodeStrategies

NODE = "node-a"


def _strategies(rules: str, cluster: LocalCluster) -> NodeStrategies:
    cluster.create_object("nodes", {"metadata": {"name": NODE}})
    metrics = PluginMetrics(lambda: PluginState(True, [], Path("/nonexistent")))
    return NodeStrategies(NODE, rules, "timeslice", cluster, metrics)


def _fallback_rules(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.fields["rule"] for r in caplog.records if r.getMessage() == "strategy.fallback"]


def test_the_log_line_names_the_rule_the_gpu_could_not_run(caplog: pytest.LogCaptureFixture) -> None:
    cluster = LocalCluster()
    rules = _strategies("1=mig,*=exclusive", cluster)
    with caplog.at_level(logging.WARNING):
        strategies, _pinned = rules.resolve(fake_node("1xA100-80GB,1xT4", NODE))
    assert strategies == {0: "exclusive", 1: "timeslice"}  # GPU 1, the T4, has no MIG
    assert _fallback_rules(caplog) == ["1=mig"]
    assert "rule '1=mig'" in cluster.events[0]["message"]


def test_a_fallback_no_rule_gave_says_built_in_default(caplog: pytest.LogCaptureFixture) -> None:
    cluster = LocalCluster()
    rules = _strategies("", cluster)
    gpu = fake_node("1xT4", NODE)[0]
    with caplog.at_level(logging.WARNING):
        rules.announce_fallback(gpu, "mig", "", "no MIG support")
    assert _fallback_rules(caplog) == ["(built-in default)"]
    assert "rule '(built-in default)'" in cluster.events[0]["message"]
