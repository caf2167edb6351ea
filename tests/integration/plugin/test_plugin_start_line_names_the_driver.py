"""The plugin's `plugin.starting` line names the NVIDIA driver it found and how many of the driver's libraries
a claim's container gets (server.py, `_scan_layout`): what a person reading the log of a node whose claims
miss a library checks first. A node with fake GPUs and no driver (nothing requires one) starts all the same,
its line naming no driver."""

from __future__ import annotations

import re
import shutil

from support.driverroot import VERSION

from driver.plugin.container.driverfiles import scan_driver


def _start_fields(plugin) -> dict[str, str]:
    line = plugin.wait_for_log(r"[^\n]*event=plugin\.starting[^\n]*").group(0)
    return dict(re.findall(r"(\w+)=(\S+)", line))


def test_the_start_line_names_the_driver_and_its_libraries(node, plugin_factory) -> None:
    libraries = scan_driver(node.driver_root).libraries
    plugin = plugin_factory()
    fields = _start_fields(plugin)
    assert (fields.get("driver"), fields.get("driver_files")) == (VERSION, str(len(libraries)))


def test_without_a_driver_the_plugin_starts_and_names_none(node, plugin_factory) -> None:
    shutil.rmtree(node.driver_root / "usr")  # the driver's libraries gone: only the fake GPUs are left
    plugin = plugin_factory()
    fields = _start_fields(plugin)
    assert "driver" not in fields and "driver_files" not in fields, fields
    assert plugin.proc.poll() is None
