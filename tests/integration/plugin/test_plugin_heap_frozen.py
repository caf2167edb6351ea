"""The plugin process freezes its start-up heap once started (driver/heap.py; docs/performance.md, seventh
pass): the objects start-up left alive are out of every later collection's walk."""

from __future__ import annotations


def test_a_started_plugin_has_frozen_its_start_up_heap(plugin_factory):
    plugin = plugin_factory("soft", extra=("--log-level", "debug"))
    found = plugin.wait_for_log(r"event=plugin\.heap-frozen objects=(\d+)")
    # The kubernetes client, gRPC, pydantic and the plugin's own state: tens of thousands of objects.
    assert int(found.group(1)) > 10_000, found.group(0)
