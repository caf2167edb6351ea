"""A restarted plugin whose NodePartitioning is applied and unchanged does not write its status again
(driver/plugin/mig/partitioning.py, `_comparable`): the status it reads back from the API holds each
condition's lastTransitionTime, the one it builds keeps those times, and only the rest is compared. A write
per restart bumps the object's resourceVersion, wakes every watcher of NodePartitionings (the controller)
and, were the comparison to see the times, would be echoed back by the plugin's own informer."""

from __future__ import annotations

from support.plugin_harness import NODE
from test_plugin_mig import wait_for
from test_plugin_partitioning import FAST, PLURAL, condition, put_partitioning, status


def _version(node) -> str:
    return node.cluster.get_object(PLURAL, NODE)["metadata"]["resourceVersion"]


def test_an_unchanged_status_is_not_written_again_after_a_restart(node, plugin_factory) -> None:
    first = plugin_factory("soft", extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "mig"})
    wait_for(lambda: condition(node, "Applied").get("status") == "True")
    assert first.stop() == 0
    before, written = _version(node), status(node)
    # start() returns once the plugin has registered, after its first publish and the status check that
    # follows it (server.py starts the servers last): a rewrite would already be in the object.
    plugin_factory("soft", extra=FAST)
    assert _version(node) == before, (written, status(node))
    assert status(node) == written
