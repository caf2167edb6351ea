"""--placement on a plugin process: the published order of the soft devices follows the prepared load."""

from __future__ import annotations

import time
import uuid

import pytest
from support.plugin_harness import NODE, result

from driver import names


def _soft_order(node) -> list[str]:
    slices = sorted(
        node.cluster.list_resource_slices(names.DRIVER_NAME, NODE), key=lambda s: s["metadata"]["name"]
    )
    return [
        d["name"] for s in slices for d in s["spec"].get("devices") or [] if d.get("allowMultipleAllocations")
    ]


def _generation(node) -> int:
    return max(
        s["spec"]["pool"]["generation"] for s in node.cluster.list_resource_slices(names.DRIVER_NAME, NODE)
    )


def _wait_order(node, want: list[str], plugin=None, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while _soft_order(node) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _soft_order(node) == want, plugin.log()[-6000:] if plugin else ""


def _devices_by_name(node) -> dict[str, dict]:
    return {d["name"]: d for d in node.devices()}


@pytest.mark.parametrize(
    ("placement", "loaded", "after"),
    [
        ("spread", "gpu-0", ["gpu-1", "gpu-0"]),  # the loaded GPU goes last
        ("binpack", "gpu-1", ["gpu-1", "gpu-0"]),  # the loaded GPU comes first
    ],
)
def test_prepare_reorders_the_published_soft_devices_and_unprepare_restores(
    node, kubelet, plugin_factory, placement, loaded, after
):
    plugin = plugin_factory("0=soft,1=soft,exclusive", extra=("--placement", placement))
    _wait_order(node, ["gpu-0", "gpu-1"])  # no load: GPU index order
    before = _devices_by_name(node)
    generation = _generation(node)

    # A burst of three prepares on one GPU: one re-publish, one generation.
    claims = [
        node.put_claim(f"c{i}", [result("s", loaded, share_id=str(uuid.uuid4()), consumed={"memory": "4Gi"})])
        for i in range(3)
    ]
    for c in claims:
        assert kubelet.prepare([c])[c[2]]["error"] == ""
    _wait_order(node, after)
    time.sleep(1.5)  # past the coalescing window: nothing more is written
    assert _generation(node) == generation + 1
    # Only the order changed: the same devices, names, capacity and attributes.
    assert _devices_by_name(node) == before

    for c in claims:
        assert kubelet.unprepare([c]) == {c[2]: ""}
    _wait_order(node, ["gpu-0", "gpu-1"], plugin)
    assert _generation(node) == generation + 2


def test_index_placement_never_reorders(node, kubelet, plugin_factory):
    plugin_factory("0=soft,1=soft,exclusive")  # the default: --placement index
    _wait_order(node, ["gpu-0", "gpu-1"])
    generation = _generation(node)
    c = node.put_claim("c", [result("s", "gpu-1", share_id=str(uuid.uuid4()), consumed={"memory": "4Gi"})])
    assert kubelet.prepare([c])[c[2]]["error"] == ""
    time.sleep(1.5)
    assert _soft_order(node) == ["gpu-0", "gpu-1"]
    assert _generation(node) == generation


def test_a_bad_placement_is_a_usage_error(node, plugin_factory):
    import subprocess
    import sys

    from support.plugin_harness import REPO

    out = subprocess.run(
        [sys.executable, "-m", "driver.cli", "plugin", *node.args("soft", "--placement", "roundrobin")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--placement" in out.stderr and "roundrobin" in out.stderr
