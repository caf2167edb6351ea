"""The plugin process applies its node's NodePartitioning (fake NVML, FileCluster): MIG mode switched on an
idle GPU, the pool republished, status written; a GPU with a prepared claim waits; a crash at each step
resumes the change on restart, or rolls it back when the NodePartitioning is gone."""

from __future__ import annotations

import json
import time

import pytest
from support.plugin_harness import NODE, result
from test_plugin_mig import gpu_state, published, wait_for

from driver import names
from driver.cluster.base import Conflict, NotFound
from driver.plugin.faults import PARTITIONING_POINTS

PLURAL = "nodepartitionings"
FAST = ("--publish-interval", "0.5")


def put_partitioning(node, *gpus: dict) -> dict:
    obj = {
        "apiVersion": "carve.dev/v1alpha1",
        "kind": "NodePartitioning",
        "metadata": {"name": NODE},
        "spec": {"gpus": list(gpus)},
    }
    for _ in range(5):  # the plugin writes the status meanwhile: read again, as a controller would
        try:
            current = node.cluster.get_object(PLURAL, NODE)
        except NotFound:
            return node.cluster.create_object(PLURAL, obj)
        try:
            return node.cluster.update_object(PLURAL, {**current, "spec": obj["spec"]})
        except Conflict:
            continue
    raise AssertionError(f"{PLURAL} {NODE}: five conflicts in a row")


def status(node) -> dict:
    return node.cluster.get_object(PLURAL, NODE).get("status") or {}


def condition(node, kind: str) -> dict:
    return next((c for c in status(node).get("conditions") or [] if c["type"] == kind), {})


def record(node) -> dict:
    return json.loads((node.plugin_dir / "partitioning.json").read_text())


def test_a_soft_gpu_becomes_mig_and_the_status_says_so(node, plugin_factory):
    plugin_factory("soft", extra=FAST)
    assert published(node)["gpu-0"] == names.TYPE_VGPU
    put_partitioning(node, {"index": 0, "strategy": "mig"})
    wait_for(lambda: "gpu-0-mig-3g40gb-0" in published(node))
    assert gpu_state(node)[0]["mig"] is True
    assert published(node)["gpu-1"] == names.TYPE_VGPU  # not named: keeps --strategy
    wait_for(lambda: condition(node, "Applied").get("status") == "True")
    gpus = {g["index"]: g for g in status(node)["gpus"]}
    assert (gpus[0]["strategy"], gpus[0]["migMode"]) == ("mig", "Enabled")
    assert gpus[2]["migMode"] == "NotSupported" and "pending" not in gpus[0]
    assert (
        status(node)["observedGeneration"] == node.cluster.get_object(PLURAL, NODE)["metadata"]["generation"]
    )
    assert record(node)["state"] == "applied" and record(node)["desired"]["0"] == "mig"


def test_a_gpu_with_a_prepared_claim_waits_then_switches(node, kubelet, plugin_factory):
    plugin_factory("soft", extra=FAST)
    share = "0b0e0a0d-1111-4222-8333-444455556666"
    claim = node.put_claim("s", [result("s", "gpu-0", share_id=share, consumed={"memory": "1Gi"})])
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    put_partitioning(node, {"index": 0, "strategy": "mig"})
    wait_for(lambda: condition(node, "Applied").get("status") == "False")
    gpu0 = next(g for g in status(node)["gpus"] if g["index"] == 0)
    assert gpu0["pending"] == "waiting for 1 prepared claim" and gpu0["migMode"] == "Disabled"
    assert "GPU 0: waiting for 1 prepared claim" in condition(node, "Applied")["message"]
    assert gpu_state(node)[0]["mig"] is False and record(node)["state"] == "applying"
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    wait_for(lambda: condition(node, "Applied").get("status") == "True")
    assert gpu_state(node)[0]["mig"] is True and "gpu-0-mig-1g10gb-6" in published(node)


def test_an_entry_the_node_cannot_follow_is_reported_degraded(node, plugin_factory):
    plugin_factory("soft", extra=FAST)
    put_partitioning(node, {"index": 2, "strategy": "mig"}, {"index": 1, "strategy": "exclusive"})
    wait_for(lambda: published(node).get("gpu-1") == names.TYPE_GPU)
    wait_for(lambda: condition(node, "Degraded").get("status") == "True")
    degraded = condition(node, "Degraded")
    assert degraded["reason"] == "InvalidSpec" and "Tesla T4" in degraded["message"]
    assert published(node)["gpu-2"] == names.TYPE_VGPU  # the T4 keeps --strategy


@pytest.mark.parametrize("point", PARTITIONING_POINTS)
def test_a_crash_while_applying_resumes_on_restart(node, plugin_factory, point):
    crashing = plugin_factory("soft", env={"CARVE_FAULT": point}, extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "mig"})
    assert crashing.wait_exit(timeout_s=30) == -9
    assert record(node)["state"] == "applying" and record(node)["desired"]["0"] == "mig"
    plugin_factory("soft", extra=FAST)
    assert "gpu-0-mig-3g40gb-0" in published(node)  # applied before the first publish of the restart
    assert gpu_state(node)[0]["mig"] is True
    wait_for(lambda: condition(node, "Applied").get("status") == "True")
    wait_for(lambda: record(node)["state"] == "applied")


def test_a_crash_mid_change_rolls_back_when_the_node_partitioning_is_gone(node, plugin_factory):
    first = plugin_factory("soft", extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "exclusive"})
    wait_for(lambda: record(node)["state"] == "applied" and record(node)["desired"]["0"] == "exclusive")
    first.stop()
    crashing = plugin_factory("soft", env={"CARVE_FAULT": "partitioning-after-record"}, extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "mig"})
    assert crashing.wait_exit(timeout_s=30) == -9
    node.cluster.delete_object(PLURAL, NODE)
    restarted = plugin_factory("soft", extra=FAST)
    # Back to what ran before the change (exclusive), not to --strategy (soft).
    assert published(node)["gpu-0"] == names.TYPE_GPU and gpu_state(node)[0]["mig"] is False
    restarted.wait_for_log(r"event=partitioning.rollback")
    wait_for(lambda: record(node)["state"] == "applied")
    time.sleep(1.5)  # the informer has listed by now: without a NodePartitioning nothing changes
    assert record(node)["desired"]["0"] == "exclusive" and published(node)["gpu-0"] == names.TYPE_GPU


def test_a_mig_layout_restricts_the_published_devices_and_a_new_layout_republishes(node, plugin_factory):
    plugin_factory("soft", extra=FAST)
    layout = [{"profile": "3g.40gb", "placement": 4}, {"profile": "1g.10gb", "placement": 0}]
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": layout})
    wait_for(lambda: "gpu-0-mig-3g40gb-4" in published(node))
    wait_for(lambda: condition(node, "Applied").get("status") == "True")
    gpu0 = sorted(d for d in published(node) if d.startswith("gpu-0"))
    assert gpu0 == ["gpu-0-mig-1g10gb-0", "gpu-0-mig-3g40gb-4"]  # nor the whole GPU
    assert condition(node, "Degraded").get("status") == "False"
    assert gpu_state(node)[0]["mig"] is True
    # Another layout, same strategy: only the devices change.
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": [{"profile": "7g.80gb"}]})
    wait_for(lambda: sorted(d for d in published(node) if d.startswith("gpu-0")) == ["gpu-0-mig-7g80gb-0"])
    # No layout: every placement again.
    put_partitioning(node, {"index": 0, "strategy": "mig"})
    wait_for(lambda: "gpu-0-mig-1g10gb-6" in published(node) and "gpu-0" in published(node))


# ---- a new migLayout waits for its GPU to be idle, like a new strategy ---------------------------------

L1 = [{"profile": "3g.40gb", "placement": 4}, {"profile": "1g.10gb", "placement": 0}]
L1_DEVICES = ["gpu-0-mig-1g10gb-0", "gpu-0-mig-3g40gb-4"]
L2 = [{"profile": "7g.80gb"}]  # drops both placements of L1


def gpu0_devices(node) -> list[str]:
    return sorted(d for d in published(node) if d.startswith("gpu-0"))


def pool_generation(node) -> int:
    return max(
        s["spec"]["pool"]["generation"] for s in node.cluster.list_resource_slices(names.DRIVER_NAME, NODE)
    )


def gpu0_status(node) -> dict:
    return next((g for g in status(node).get("gpus") or [] if g["index"] == 0), {})


def layout_applied_with_a_claim_on_it(node, kubelet, plugin_factory):
    """GPU 0 mig with layout L1 applied, a claim prepared on its 1g.10gb placement 0."""
    plugin = plugin_factory("soft", extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": L1})
    wait_for(lambda: gpu0_devices(node) == L1_DEVICES and record(node)["state"] == "applied")
    claim = node.put_claim("m", [result("m", "gpu-0-mig-1g10gb-0")])
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    return plugin, claim


def assert_waits_on_l1_then_applies_l2(node, kubelet, claim) -> None:
    wait_for(lambda: gpu0_status(node).get("pending") == "waiting for 1 prepared claim (migLayout)")
    applied = condition(node, "Applied")
    assert (applied["status"], applied["reason"]) == ("False", "WaitingForGPUs")
    assert "GPU 0: waiting for 1 prepared claim (migLayout)" in applied["message"]
    assert gpu0_status(node)["strategy"] == "mig"
    assert gpu0_devices(node) == L1_DEVICES  # the old layout is still what the GPU publishes
    assert record(node)["state"] == "applying"
    assert record(node)["layouts"]["0"] == [["7g.80gb", None]]
    assert record(node)["publishedLayouts"]["0"] == [["3g.40gb", 4], ["1g.10gb", 0]]
    generation = pool_generation(node)
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    wait_for(lambda: gpu0_devices(node) == ["gpu-0-mig-7g80gb-0"])
    assert pool_generation(node) > generation
    wait_for(lambda: condition(node, "Applied").get("status") == "True")
    wait_for(lambda: record(node)["state"] == "applied")
    assert record(node)["publishedLayouts"]["0"] == [["7g.80gb", None]] and "pending" not in gpu0_status(node)


def test_a_new_layout_waits_for_a_prepared_claim_on_a_placement_it_drops(node, kubelet, plugin_factory):
    _, claim = layout_applied_with_a_claim_on_it(node, kubelet, plugin_factory)
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": L2})
    assert_waits_on_l1_then_applies_l2(node, kubelet, claim)


def test_a_restarted_plugin_publishes_the_recorded_layout_not_the_new_one(node, kubelet, plugin_factory):
    first, claim = layout_applied_with_a_claim_on_it(node, kubelet, plugin_factory)
    first.stop()
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": L2})  # while the plugin is down
    plugin_factory("soft", extra=FAST)
    assert gpu0_devices(node) == L1_DEVICES  # the first publish of the restart: the layout recorded published
    assert_waits_on_l1_then_applies_l2(node, kubelet, claim)


@pytest.mark.parametrize("point", PARTITIONING_POINTS)
def test_a_crash_while_a_layout_waits_resumes_it_on_restart(node, kubelet, plugin_factory, point):
    first, claim = layout_applied_with_a_claim_on_it(node, kubelet, plugin_factory)
    first.stop()
    crashing = plugin_factory("soft", env={"CARVE_FAULT": point}, extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": L2})
    assert crashing.wait_exit(timeout_s=30) == -9
    plugin_factory("soft", extra=FAST)
    assert gpu0_devices(node) == L1_DEVICES  # neither L2 nor every placement: the claim's layout
    assert_waits_on_l1_then_applies_l2(node, kubelet, claim)


def test_without_its_node_partitioning_a_restarted_plugin_keeps_the_recorded_layout(node, plugin_factory):
    first = plugin_factory("soft", extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": L1})
    wait_for(lambda: gpu0_devices(node) == L1_DEVICES and record(node)["state"] == "applied")
    first.stop()
    crashing = plugin_factory("soft", env={"CARVE_FAULT": "partitioning-after-record"}, extra=FAST)
    put_partitioning(node, {"index": 0, "strategy": "mig", "migLayout": L2})
    assert crashing.wait_exit(timeout_s=30) == -9
    node.cluster.delete_object(PLURAL, NODE)
    restarted = plugin_factory("soft", extra=FAST)
    # The change is rolled back to the layout before it, not to every placement.
    assert gpu0_devices(node) == L1_DEVICES
    restarted.wait_for_log(r"event=partitioning.rollback")
    wait_for(lambda: record(node)["state"] == "applied")
    assert record(node)["layouts"]["0"] == [["3g.40gb", 4], ["1g.10gb", 0]]
    time.sleep(1.5)  # the informer has listed by now: without a NodePartitioning nothing changes
    assert gpu0_devices(node) == L1_DEVICES
