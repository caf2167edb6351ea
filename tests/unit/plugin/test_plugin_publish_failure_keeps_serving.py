"""A publish the API server keeps refusing does not take the plugin down (server.py, _publish_once): the
error is kept for the health check and the log, and prepare's catalog is the pool the plugin wanted to
publish, so claims already allocated on these devices still prepare while it retries in the background."""

from __future__ import annotations

from driver.cluster import LocalCluster
from driver.cluster.base import ClusterError
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.publisher import Publisher
from driver.plugin.server import Plugin, PluginConfig

NODE = "node-a"


def test_a_refused_publish_is_an_error_to_report_and_the_catalog_is_what_was_wanted(tmp_path):
    cluster = LocalCluster(version=(1, 36))

    def refused(obj, dry_run=False):
        raise ClusterError("admission webhook refused", "ResourceSlice", status=500)

    cluster.create_resource_slice = refused
    plugin = Plugin(PluginConfig(NODE, plugin_dir=tmp_path, claim_status=False), cluster, [], None, None)
    gpus = fake_node("2xA100-80GB", NODE)
    plugin.publisher = Publisher(
        cluster,
        NODE,
        lambda s, g: build_slices(NODE, gpus, s, Settings(), "1.36", g),
        {0: "exclusive", 1: "exclusive"},
        attempts=1,
        sleep=lambda _s: None,
    )
    assert plugin._publish_once() is False
    assert (
        plugin.publish_error
        == f"publishing ResourceSlices of node {NODE}: ClusterError: admission webhook refused"
    )
    assert {"gpu-0", "gpu-1"} <= set(plugin._catalog)
