"""A cluster whose DRADeviceTaints gate is off drops device taints: the publisher finds it out by its
dry-run probe (one taint on one device, nothing stored) before any device is unhealthy, so a later taint
is not written to a server that would silently drop it (a survivor of generated mutants in
driver/plugin/publisher.py: the probe never tainting)."""

from __future__ import annotations

from driver import names
from driver.cluster import LocalCluster, fields_of_disabled_gates
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.publisher import GATE_TAINTS, Publisher

NODE = "node-a"


def _publisher(cluster):
    gpus = fake_node("1xT4", NODE)
    return Publisher(cluster, NODE, lambda s, g: build_slices(NODE, gpus, s, Settings(), "1.36", g),
                     {0: "exclusive"}, sleep=lambda _s: None)


def test_the_dry_run_probe_finds_the_taints_gate_off_on_a_healthy_node():
    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_TAINTS]))
    pub = _publisher(cluster)
    stored = pub.publish()
    assert GATE_TAINTS in pub.gates_off
    assert not any(d.get("taints") for s in stored for d in s["spec"].get("devices", []))  # no probe stored
    assert not any("probe" in s["metadata"]["name"] for s in cluster.list_resource_slices(names.DRIVER_NAME))


def test_the_probe_finds_nothing_off_where_the_server_keeps_taints():
    pub = _publisher(LocalCluster())
    pub.publish()
    assert GATE_TAINTS not in pub.gates_off
