"""On a node whose MIG the GPU Operator's MIG manager manages (label nvidia.com/mig.config), only the GPUs
asked to run MIG fall back; a GPU under `exclusive` (or any other strategy) runs it, with no fallback
announced (docs/plugin.md "MIG mode per GPU")."""

from __future__ import annotations

from pathlib import Path

from driver.cluster import LocalCluster
from driver.devices.catalog import fake_node
from driver.metrics import PluginMetrics
from driver.metrics.collector import PluginState
from driver.plugin.strategies import NodeStrategies
from driver.plugin.toolkit import MIG_CONFIG_LABEL

NODE = "node-a"


def test_the_mig_manager_label_moves_only_mig_to_the_fallback():
    cluster = LocalCluster()
    cluster.create_object("nodes", {"metadata": {"name": NODE, "labels": {MIG_CONFIG_LABEL: "all-disabled"}}})
    metrics = PluginMetrics(lambda: PluginState(True, [], Path("/nonexistent")))
    rules = NodeStrategies(NODE, "0=mig,1=exclusive,2=soft", "timeslice", cluster, metrics)
    strategies, _pinned = rules.resolve(fake_node("2xA100-80GB,1xT4", NODE))
    assert strategies == {0: "timeslice", 1: "exclusive", 2: "soft"}
    assert [e["reason"] for e in cluster.events] == ["StrategyFallback"]
    assert "GPU 0" in cluster.events[0]["message"]
