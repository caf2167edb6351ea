"""What the plugin tells the operator about the node's setup (driver/plugin/announce.py), where the operator
looks: each unsafe NVIDIA container toolkit setting and each feature gate the API server has off is a Node
Event (reason and message as docs/install.md's troubleshooting names them) and a metric; an Event the
cluster refuses is logged, never stops the plugin."""

from __future__ import annotations

import logging
from pathlib import Path

from driver.cluster import LocalCluster
from driver.metrics import PluginMetrics
from driver.metrics.collector import PluginState
from driver.plugin.announce import Announcer
from driver.plugin.publisher import GATE_CONSUMABLE, GATE_PARTITIONABLE
from driver.plugin.strategies import NodeStrategies
from driver.plugin.toolkit import ENVVAR_UNPRIVILEGED, VOLUME_MOUNTS

PACKAGE = "etc/nvidia-container-runtime/config.toml"


def _announcer(cluster):
    metrics = PluginMetrics(lambda: PluginState(True, [], Path("/nonexistent")))
    return Announcer(metrics, NodeStrategies("node-a", "", "exclusive", cluster, metrics)), metrics


def test_each_unsafe_toolkit_setting_is_a_node_event_and_a_metric(tmp_path):
    (tmp_path / PACKAGE).parent.mkdir(parents=True)
    (tmp_path / PACKAGE).write_text(f"{ENVVAR_UNPRIVILEGED} = true\n{VOLUME_MOUNTS} = true\n")
    cluster = LocalCluster()
    announcer, metrics = _announcer(cluster)
    announcer.toolkit(tmp_path)
    events = [
        (e["reason"], e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for e in cluster.events
    ]
    assert events == [("ContainerToolkitUnsafe", "Warning", "Node", "node-a")] * 2
    first, second = (e["message"] for e in cluster.events)
    assert first.startswith(
        f"NVIDIA container toolkit /{PACKAGE}: {ENVVAR_UNPRIVILEGED}: an unprivileged container"
    )
    assert second.startswith(f"NVIDIA container toolkit /{PACKAGE}: {VOLUME_MOUNTS}: a container mounting")
    assert first.endswith('(docs/install.md, "Nodes with the NVIDIA container toolkit and the GPU Operator")')
    for setting in (ENVVAR_UNPRIVILEGED, VOLUME_MOUNTS):
        sample = {"setting": setting, "path": f"/{PACKAGE}"}
        assert metrics.registry.get_sample_value("carve_plugin_toolkit_unsafe", sample) == 1


def test_a_safe_or_absent_toolkit_announces_nothing(tmp_path):
    cluster = LocalCluster()
    announcer, _ = _announcer(cluster)
    announcer.toolkit(tmp_path)
    assert cluster.events == []


def test_gates_off_are_one_node_event_naming_the_gates_and_the_gpus_changed():
    cluster = LocalCluster()
    announcer, metrics = _announcer(cluster)
    announcer.gates_off({GATE_PARTITIONABLE, GATE_CONSUMABLE}, {1: "soft->slots", 0: "mig->exclusive"})
    (e,) = cluster.events
    assert (e["reason"], e["involvedObject"]["name"]) == ("FeatureGatesOff", "node-a")
    assert e["message"] == (
        f"the API server has {GATE_CONSUMABLE}, {GATE_PARTITIONABLE} off (it drops their fields): soft "
        "slices run as slots, MIG and time-slicing as whole GPUs (GPU 0: mig->exclusive, GPU 1: soft->slots)"
        "; "
        'turn the gates on (docs/install.md, "Feature gates per Kubernetes version")'
    )
    for gate in (GATE_CONSUMABLE, GATE_PARTITIONABLE):
        assert metrics.registry.get_sample_value("carve_plugin_feature_gate_off", {"gate": gate}) == 1
    announcer.gates_off({"DRADeviceTaints"}, {})
    assert "(no GPU's strategy changed)" in cluster.events[-1]["message"]


def test_an_event_the_cluster_refuses_is_logged_and_the_plugin_goes_on(caplog):
    class Refusing(LocalCluster):
        def create_event(self, namespace, body):
            raise PermissionError("events is forbidden")

    announcer, metrics = _announcer(Refusing())
    with caplog.at_level(logging.WARNING):
        announcer.gates_off({GATE_CONSUMABLE}, {0: "soft->slots"})
    (r,) = [r for r in caplog.records if r.getMessage() == "strategy.event-failed"]
    assert r.fields == {"reason": "FeatureGatesOff", "error": "PermissionError: events is forbidden"}
    assert metrics.registry.get_sample_value("carve_plugin_feature_gate_off", {"gate": GATE_CONSUMABLE}) == 1
