"""The plugin prepares a claim as the API server gives it: the ResourceClaim and the node's ResourceSlices
read back as JSON, every string in them a fresh object, never the plugin's own constant. So the claim's
results are picked by the driver's name by value, a soft share's limiter gets the cores the share consumed,
and the claim's status says who enforces each device type (MPS server, MIG hardware, nothing for a time
slice), as for a catalog built from the plugin's own dicts."""

from __future__ import annotations

import json

import pytest

from driver import names
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.claims.plan import ClaimRef, claim_limits, plan_claim
from driver.plugin.claims.status import device_statuses
from driver.plugin.state.checkpoint import ClaimRecord, DeviceRecord

NODE = "node-a"
REF = ClaimRef("ml", "train", "uid-1")
UUID = "GPU-11111111-2222-3333-4444-555555555555"


def fresh(value: object) -> object:
    # What the kubernetes client and the file cluster hand the plugin: JSON parsed at run time.
    return json.loads(json.dumps(value))


def catalog_of(kind: str) -> dict:
    device = {
        "name": f"gpu-0-{kind}-0",
        "attributes": {"type": {"string": kind}, "minor": {"int": 0}, "uuid": {"string": UUID}},
        "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}},
    }
    return catalog_from_slices([fresh({"spec": {"devices": [device]}})])


def claim_of(kind: str) -> dict:
    result = {"request": "r", "driver": names.DRIVER_NAME, "pool": NODE, "device": f"gpu-0-{kind}-0"}
    if kind in (names.TYPE_VGPU, names.TYPE_MPS):
        result["consumedCapacity"] = {"memory": "4Gi", "cores": "30"}
    claim = {
        "metadata": {"uid": REF.uid, "name": REF.name, "namespace": REF.namespace},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    return fresh(claim)


def test_a_soft_share_read_from_json_is_planned_with_the_cores_it_consumed() -> None:
    kind = names.TYPE_VGPU
    plan = plan_claim(REF, claim_of(kind), NODE, catalog_of(kind))
    assert [p.device.name for p in plan.devices] == [f"gpu-0-{kind}-0"]
    limits = claim_limits(plan, "/r")
    assert limits is not None
    assert [(d.uuid, d.memory_bytes, d.cores_percent) for d in limits.devices] == [(UUID, 4 << 30, 30)]


@pytest.mark.parametrize(
    ("kind", "enforced", "reason"),
    [
        (names.TYPE_VGPU, "True", "Limiter"),
        (names.TYPE_MPS, "True", "MpsClientLimits"),
        (names.TYPE_MIG, "True", "MigIsolation"),
        (names.TYPE_TIMESLICE, "False", "TimeSliced"),
        (names.TYPE_GPU, "True", "Exclusive"),
    ],
)
def test_the_status_of_a_device_read_from_json_names_its_enforcement(
    kind: str, enforced: str, reason: str
) -> None:
    plan = plan_claim(REF, claim_of(kind), NODE, catalog_of(kind))
    (p,) = plan.devices
    rec = DeviceRecord(["r"], NODE, p.device.name, None, [], type=p.device.type, gpu_uuid=UUID)
    record = ClaimRecord(REF.uid, REF.namespace, REF.name, "PrepareCompleted", [rec])
    (entry,) = device_statuses(plan, record, claim_limits(plan, "/r"), now="2026-01-01T00:00:00Z")
    (condition,) = [c for c in entry["conditions"] if c["type"] == "Enforced"]
    assert (condition["status"], condition["reason"]) == (enforced, reason)
