"""status.devices entries (pure) and their writer: retry on conflict, other drivers kept, a recreated
claim left alone."""

from __future__ import annotations

import threading

from driver import names
from driver.cluster import LocalCluster
from driver.cluster.base import Conflict
from driver.limits import ClaimLimits, DeviceLimit
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimPlan, ClaimRef, PlannedDevice
from driver.plugin.claims.status import ClaimStatusWriter, device_statuses
from driver.plugin.health.service import DeviceReport, HealthBroadcast, HealthV1, HealthV1alpha1
from driver.plugin.state.checkpoint import ClaimRecord, DeviceRecord

REF = ClaimRef("ml", "c", "uid-1")


def _plan(device_type: str, admin: bool = False) -> tuple[ClaimPlan, ClaimRecord]:
    dev = NodeDevice(name="gpu-1", type=device_type, gpu_uuid="GPU-1", minor=1)
    planned = PlannedDevice("g", "node-a", dev, "share-1", config=None, admin=admin)
    rec = DeviceRecord(
        ["g"], "node-a", "gpu-1", "share-1", [], type=device_type, gpu_uuid="GPU-1", admin=admin
    )
    return ClaimPlan(REF, (planned,)), ClaimRecord(REF.uid, "ml", "c", "PrepareCompleted", [rec])


def test_soft_slice_entry_carries_its_limits():
    plan, record = _plan(names.TYPE_VGPU)
    limits = ClaimLimits(devices=(DeviceLimit(1 << 30, 0, "GPU-1"),), region_path="/r")
    (e,) = device_statuses(plan, record, limits, now="2026-01-01T00:00:00Z")
    assert e["shareID"] == "share-1" and e["data"]["memoryLimitBytes"] == 1 << 30
    assert e["data"]["coresLimitPercent"] == 100  # 0 = unthrottled: the whole share
    assert [c["type"] for c in e["conditions"]] == ["Ready", "Enforced"]


def test_admin_entry_has_no_limits():
    plan, record = _plan(names.TYPE_VGPU, admin=True)
    (e,) = device_statuses(plan, record, None)
    assert e["data"]["adminAccess"] is True and "memoryLimitBytes" not in e["data"]
    assert e["conditions"][1]["status"] == "False" and e["conditions"][1]["reason"] == "AdminAccess"


def _cluster_with_claim(devices=None):
    cluster = LocalCluster()
    status = {"allocation": {"devices": {"results": []}}}
    if devices:
        status["devices"] = devices
    cluster.put_resource_claim(
        {"metadata": {"name": "c", "namespace": "ml", "uid": "uid-1"}, "status": status}
    )
    return cluster


def test_conflicts_are_retried_and_other_drivers_kept():
    other = {"driver": "net.example.com", "pool": "p", "device": "nic"}
    cluster = _cluster_with_claim([other])
    real = cluster.update_resource_claim_status
    failures = iter([True, True])

    def flaky(obj):
        if next(failures, False):
            raise Conflict("stale", "ResourceClaim", "c", "ml", 409)
        return real(obj)

    cluster.update_resource_claim_status = flaky
    ours = {"driver": names.DRIVER_NAME, "pool": "node-a", "device": "gpu-1"}
    assert ClaimStatusWriter(cluster, sleep=lambda _s: None).write(REF, [ours])
    assert cluster.get_resource_claim("ml", "c")["status"]["devices"] == [other, ours]
    assert ClaimStatusWriter(cluster).clear(REF)
    assert cluster.get_resource_claim("ml", "c")["status"]["devices"] == [other]


def test_a_recreated_claim_is_not_touched():
    cluster = _cluster_with_claim()
    ref = ClaimRef("ml", "c", "another-uid")
    assert not ClaimStatusWriter(cluster).write(ref, [{"driver": names.DRIVER_NAME}])
    assert "devices" not in cluster.get_resource_claim("ml", "c")["status"]


class _Ctx:
    def __init__(self):
        self.active = True

    def is_active(self):
        return self.active


def test_health_stream_sends_the_list_then_each_change_in_both_versions():
    state = {"healthy": True}
    broadcast = HealthBroadcast(
        lambda: [DeviceReport("node-a", "gpu-0", state["healthy"], "why")], resend_s=30
    )
    for servicer in (HealthV1(broadcast), HealthV1alpha1(broadcast)):
        ctx = _Ctx()
        stream = servicer.NodeWatchResources(None, ctx)
        first = next(stream)
        assert first.devices[0].health == servicer.pb.HEALTHY
        assert (
            first.devices[0].device.device_name == "gpu-0"
            and first.devices[0].health_check_timeout_seconds == 90
        )
        state["healthy"] = False
        threading.Timer(0.05, broadcast.publish).start()
        second = next(stream)  # woken by the change, not the 30 s resend
        assert second.devices[0].health == servicer.pb.UNHEALTHY and second.devices[0].message == "why"
        state["healthy"] = True
        ctx.active = False
        broadcast.publish()
    broadcast.close()


def test_a_status_write_that_always_conflicts_backs_off_between_attempts_and_gives_up(caplog):
    # every attempt conflicts: the writer waits 0.05 s, then twice that, between attempts, not after the
    # last one (whose wait would only delay the queue's next report), and reports the claim as not written
    cluster = _cluster_with_claim()
    tries = []

    def conflict(obj):
        tries.append(obj)
        raise Conflict("stale", "ResourceClaim", "c", "ml", 409)

    cluster.update_resource_claim_status = conflict
    waits = []
    writer = ClaimStatusWriter(cluster, attempts=3, sleep=waits.append)
    with caplog.at_level("WARNING"):
        assert not writer.write(REF, [{"driver": names.DRIVER_NAME, "pool": "node-a", "device": "gpu-1"}])
    assert len(tries) == 3 and waits == [0.05, 0.1]
    (gave_up,) = [r for r in caplog.records if r.getMessage() == "claim-status.conflict"]
    assert gave_up.fields["attempts"] == 3
