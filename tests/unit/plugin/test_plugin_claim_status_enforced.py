"""What a claim's status.devices entry tells its owner about enforcement (docs/plugin.md, "Enforced"), for
each device type: soft slices and slots are held by the limiter, MPS shares by the MPS server and the
limiter (a bug fixed: an MPS share said `Exclusive`, "the whole GPU is this claim's", on a GPU it shares
with other claims), MIG by the hardware, a whole GPU is exclusive, a time slice has no quota. The limits are
given only for the types the limiter holds, and a MIG device's UUID only once its instance exists."""

from __future__ import annotations

import pytest

from driver import names
from driver.limits import ClaimLimits, DeviceLimit
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimPlan, ClaimRef, PlannedDevice
from driver.plugin.claims.status import device_statuses
from driver.plugin.state.checkpoint import ClaimRecord, DeviceRecord, MigRecord

REF = ClaimRef("ml", "c", "uid-1")
NOW = "2026-01-01T00:00:00Z"
LIMITS = ClaimLimits(devices=(DeviceLimit(3 << 30, 40, "GPU-1"),), region_path="/r")


def _entry(
    device_type: str, mig: MigRecord | None = None, limits: ClaimLimits | None = LIMITS, consumed=None
) -> dict:
    dev = NodeDevice(name="gpu-1", type=device_type, gpu_uuid="GPU-1", minor=1)
    plan = ClaimPlan(REF, (PlannedDevice("g", "node-a", dev, None, config=None, consumed=consumed or {}),))
    rec = DeviceRecord(["g"], "node-a", "gpu-1", None, [], type=device_type, gpu_uuid="GPU-1", mig=mig)
    (e,) = device_statuses(plan, ClaimRecord(REF.uid, "ml", "c", "PrepareCompleted", [rec]), limits, now=NOW)
    return e


@pytest.mark.parametrize(
    ("device_type", "status", "reason", "message"),
    [
        (names.TYPE_VGPU, "True", "Limiter", "memory and compute limits are enforced by carve's limiter"),
        (names.TYPE_SLOT, "True", "Limiter", "memory and compute limits are enforced by carve's limiter"),
        (
            names.TYPE_MPS,
            "True",
            "MpsClientLimits",
            "an MPS client: memory and SM limits are enforced by the GPU's MPS server and carve's limiter",
        ),
        (
            names.TYPE_MIG,
            "True",
            "MigIsolation",
            "a MIG instance: memory and compute isolated by the hardware",
        ),
        (names.TYPE_TIMESLICE, "False", "TimeSliced", "time-sliced: no memory or compute quota"),
        (names.TYPE_GPU, "True", "Exclusive", "the whole GPU is this claim's"),
    ],
)
def test_the_enforced_condition_says_what_holds_each_device_type(device_type, status, reason, message):
    ready, enforced = _entry(device_type)["conditions"]
    assert ready == {
        "type": "Ready",
        "status": "True",
        "reason": "Prepared",
        "message": "prepared on the node; the container can start",
        "lastTransitionTime": NOW,
    }
    assert enforced == {
        "type": "Enforced",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": NOW,
    }


@pytest.mark.parametrize("device_type", [names.TYPE_VGPU, names.TYPE_SLOT])
def test_the_limiters_types_carry_their_limits(device_type):
    data = _entry(device_type)["data"]
    assert (data["memoryLimitBytes"], data["coresLimitPercent"]) == (3 << 30, 40)
    assert (data["strategy"], data["gpuUUID"]) == (device_type, "GPU-1")


@pytest.mark.parametrize(("cores", "shown"), [(30, 30), (1, 1), (99, 99), (100, 100), (0, 100), (None, 100)])
def test_an_mps_share_shows_the_sm_share_mps_enforces(cores, shown):
    # the limiter does not throttle an MPS claim (its limits file holds cores 0); MPS holds the client to
    # its consumed cores (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), which the status must show, not "100"
    mps_limits = ClaimLimits(devices=(DeviceLimit(3 << 30, 0, "GPU-1"),), region_path="/r")
    consumed = {"memory": 3 << 30} | ({} if cores is None else {"cores": cores})
    data = _entry(names.TYPE_MPS, limits=mps_limits, consumed=consumed)["data"]
    assert (data["memoryLimitBytes"], data["coresLimitPercent"]) == (3 << 30, shown)


@pytest.mark.parametrize(("cores", "shown"), [(0, 100), (1, 1), (99, 99)])
def test_a_slices_cores_of_0_read_as_the_whole_gpu(cores, shown):
    limits = ClaimLimits(devices=(DeviceLimit(1 << 30, cores, "GPU-1"),), region_path="/r")
    assert _entry(names.TYPE_VGPU, limits=limits)["data"]["coresLimitPercent"] == shown


@pytest.mark.parametrize("device_type", [names.TYPE_GPU, names.TYPE_MIG, names.TYPE_TIMESLICE])
def test_other_types_carry_no_limits_even_beside_a_limits_file(device_type):
    data = _entry(device_type)["data"]
    assert "memoryLimitBytes" not in data and "coresLimitPercent" not in data and "adminAccess" not in data


def test_a_limited_device_without_a_limit_for_its_gpu_says_none():
    other_gpu = ClaimLimits(devices=(DeviceLimit(1 << 30, 10, "GPU-9"),), region_path="/r")
    assert "memoryLimitBytes" not in _entry(names.TYPE_VGPU, limits=other_gpu)["data"]
    assert "memoryLimitBytes" not in _entry(names.TYPE_VGPU, limits=None)["data"]


def test_a_mig_devices_uuid_is_given_once_its_instance_exists():
    made = MigRecord("GPU-1", "1g.10gb", 0, 1, "MIG-abc", 0)
    assert _entry(names.TYPE_MIG, mig=made)["data"]["migUUID"] == "MIG-abc"
    pending = MigRecord("GPU-1", "1g.10gb", 0, None, "", None)
    assert "migUUID" not in _entry(names.TYPE_MIG, mig=pending)["data"]
    assert "migUUID" not in _entry(names.TYPE_MIG)["data"]
