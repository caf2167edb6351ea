"""Planning a claim (pure): checks on the claim, config resolution, limits of soft slices and slots."""

from __future__ import annotations

import pytest

from driver import names
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef, PrepareError, claim_limits, plan_claim

GI = 1024**3
REF = ClaimRef("ml", "train", "uid-1")
SHARE_1 = "0b0e0a0d-1111-4222-8333-444455556666"
SHARE_2 = "0b0e0a0d-1111-4222-8333-777788889999"
CATALOG = {
    "gpu-0": NodeDevice("gpu-0", names.TYPE_VGPU, "GPU-0", 0, {"memory": 80 * GI, "cores": 100, "slots": 10}),
    "gpu-1-slot-0": NodeDevice("gpu-1-slot-0", names.TYPE_SLOT, "GPU-1", 1, {"memory": 8 * GI, "cores": 10}),
    "gpu-1-slot-1": NodeDevice("gpu-1-slot-1", names.TYPE_SLOT, "GPU-1", 1, {"memory": 8 * GI, "cores": 10}),
    "gpu-2": NodeDevice("gpu-2", names.TYPE_GPU, "GPU-2", 2, {"memory": 16 * GI}),
}


def claim(results, config=(), uid="uid-1"):
    return {
        "metadata": {"uid": uid, "name": "train", "namespace": "ml"},
        "status": {"allocation": {"devices": {"results": results, "config": list(config)}}},
    }


def res(device, request="r", pool="node-a", **extra):
    return {"request": request, "driver": names.DRIVER_NAME, "pool": pool, "device": device, **extra}


def opaque(kind, source="FromClaim", **params):
    return {
        "source": source,
        "opaque": {
            "driver": names.DRIVER_NAME,
            "parameters": {"apiVersion": names.CONFIG_API_VERSION, "kind": kind, **params},
        },
    }


def test_soft_slice_limits_come_from_consumed_capacity():
    plan = plan_claim(
        REF,
        claim(
            [res("gpu-0", shareID=SHARE_1, consumedCapacity={"memory": "4Gi", "cores": "30"})],
            [opaque("SliceConfig", oomPolicy="kill")],
        ),
        "node-a",
        CATALOG,
    )
    limits = claim_limits(plan, "/var/run/carve/region")
    assert [(d.memory_bytes, d.cores_percent, d.uuid) for d in limits.devices] == [(4 * GI, 30, "GPU-0")]
    assert limits.oom_policy == "kill"
    assert plan.devices[0].share_id == SHARE_1


def test_slots_on_one_gpu_are_summed():
    plan = plan_claim(REF, claim([res("gpu-1-slot-0"), res("gpu-1-slot-1")]), "node-a", CATALOG)
    (dev,) = claim_limits(plan, "/r").devices
    assert (dev.memory_bytes, dev.cores_percent) == (16 * GI, 20)


def test_whole_gpu_has_no_limits():
    assert claim_limits(plan_claim(REF, claim([res("gpu-2")]), "node-a", CATALOG), "/r") is None


def test_subrequest_reports_its_main_request():
    plan = plan_claim(REF, claim([res("gpu-2", request="gpu/t4")]), "node-a", CATALOG)
    assert plan.devices[0].request_name == "gpu"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (claim([res("gpu-2")], uid="other"), "metadata.uid"),
        ({"metadata": {"uid": "uid-1"}, "status": {}}, "not allocated"),
        (claim([res("gpu-2", pool="node-b")]), "pool 'node-b'"),
        (claim([res("gpu-9")]), "'gpu-9' is not a device this node publishes"),
        (claim([{**res("gpu-2"), "driver": "other.dev"}]), "no device of driver"),
        (claim([res("gpu-2")], [opaque("SliceConfig")]), "SliceConfig does not fit device type gpu"),
        (
            claim(
                [res("gpu-0", consumedCapacity={"memory": "4Gi"})], [opaque("SliceConfig", corePolicy="fast")]
            ),
            "corePolicy",
        ),
        (claim([res("gpu-0", consumedCapacity={"memory": "lots"})]), "consumedCapacity.memory"),
    ],
)
def test_bad_claims_name_the_claim_and_the_problem(obj, expected):
    with pytest.raises(PrepareError) as e:
        plan_claim(REF, obj, "node-a", CATALOG)
    assert "ml/train (uid-1)" in str(e.value)
    assert expected in str(e.value)


def test_soft_slice_without_consumed_memory_is_an_error():
    plan = plan_claim(REF, claim([res("gpu-0")]), "node-a", CATALOG)
    with pytest.raises(PrepareError, match=r"consumedCapacity\.memory"):
        claim_limits(plan, "/r")


def test_limited_devices_of_one_claim_need_one_config():
    results = [
        res("gpu-0", request="a", consumedCapacity={"memory": "1Gi"}),
        res("gpu-1-slot-0", request="b"),
    ]
    configs = [opaque("SliceConfig", priority="low")]
    configs[0]["requests"] = ["a"]
    with pytest.raises(PrepareError, match="same SliceConfig"):
        plan_claim(REF, claim(results, configs), "node-a", CATALOG)


def test_limits_follow_pci_order_not_minor_order():
    # CUDA_DEVICE_ORDER=PCI_BUS_ID numbers the container's GPUs by bus id; limit i must be that GPU's.
    catalog = {
        "gpu-0": NodeDevice(
            "gpu-0", names.TYPE_VGPU, "GPU-0", 0, {"memory": 80 * GI}, pci_bus_id="0000:81:00.0"
        ),
        "gpu-1": NodeDevice(
            "gpu-1", names.TYPE_VGPU, "GPU-1", 1, {"memory": 80 * GI}, pci_bus_id="0000:07:00.0"
        ),
    }
    results = [
        res("gpu-0", shareID=SHARE_1, consumedCapacity={"memory": "1Gi"}),
        res("gpu-1", shareID=SHARE_2, consumedCapacity={"memory": "2Gi"}),
    ]
    limits = claim_limits(plan_claim(REF, claim(results), "node-a", catalog), "/r")
    assert [(d.uuid, d.memory_bytes) for d in limits.devices] == [("GPU-1", 2 * GI), ("GPU-0", 1 * GI)]


def test_catalog_reads_the_pci_bus_id_attribute():
    from driver.plugin.claims.catalog import device_from_slice

    dev = device_from_slice(
        {
            "name": "gpu-3",
            "attributes": {
                "type": {"string": "vgpu"},
                "uuid": {"string": "GPU-3"},
                "resource.kubernetes.io/pciBusID": {"string": "0000:3B:00.0"},
            },
        }
    )
    assert (dev.minor, dev.pci_bus_id) == (3, "0000:3b:00.0")


@pytest.mark.parametrize(
    "share_id",
    [
        "s1",
        "../../etc",
        "0b0e0a0d-1111-4222-8333-444455556666\n",
        "0B0E0A0D-1111-4222-8333-444455556666",
        "",
        7,
    ],
)
def test_bad_share_id_is_refused_in_planning_naming_the_result(share_id):
    obj = claim([res("gpu-0", shareID=share_id, consumedCapacity={"memory": "1Gi"})])
    with pytest.raises(PrepareError) as e:
        plan_claim(REF, obj, "node-a", CATALOG)
    assert str(e.value).startswith("claim ml/train (uid-1): status.allocation.devices.results[0]: shareID: ")
    assert "lowercase UUID" in str(e.value)


def test_claim_config_error_names_the_index_in_the_claims_spec_and_the_class():
    # Kubernetes copies only the entries for allocated requests into the allocation: the user's index is 1.
    cfg = {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", "corePolicy": "disable"}
    spec_config = [
        {"requests": ["other"], "opaque": {"driver": names.DRIVER_NAME, "parameters": {"kind": "x"}}},
        {"requests": ["r"], "opaque": {"driver": names.DRIVER_NAME, "parameters": cfg}},
    ]
    obj = claim(
        [res("gpu-0", consumedCapacity={"memory": "1Gi"})],
        [{"source": "FromClaim", **spec_config[1]}],
    )
    obj["spec"] = {
        "devices": {
            "requests": [{"name": "r", "exactly": {"deviceClassName": "vgpu.carve.dev"}}],
            "config": spec_config,
        }
    }
    with pytest.raises(PrepareError) as e:
        plan_claim(REF, obj, "node-a", CATALOG)
    assert str(e.value).startswith(
        "claim ml/train (uid-1): device gpu-0: claim config[1]: opaque.parameters.corePolicy: 'disable' "
        "is not allowed by DeviceClass vgpu.carve.dev"
    )


def test_class_that_allows_disable_lets_the_claim_run_unthrottled():
    allow = opaque("SliceConfig", source="FromClass", claimPolicy={"corePolicy": ["disable"]})
    obj = claim(
        [res("gpu-0", consumedCapacity={"memory": "1Gi", "cores": "20"})],
        [allow, opaque("SliceConfig", corePolicy="disable")],
    )
    limits = claim_limits(plan_claim(REF, obj, "node-a", CATALOG), "/r")
    assert limits.core_policy == "disable"
    obj["status"]["allocation"]["devices"]["config"] = [opaque("SliceConfig", corePolicy="disable")]
    with pytest.raises(PrepareError, match="corePolicy: 'disable' is not allowed by the claim's DeviceClass"):
        plan_claim(REF, obj, "node-a", CATALOG)


@pytest.mark.parametrize("cores", [("100",), ("60", "60")])
def test_a_whole_gpus_worth_of_cores_on_one_gpu_is_not_throttled(cores):
    # 100 cores percent (one share, or several of one claim summed past 100) is the whole GPU: the limiter's
    # 0, no throttle at all, not a throttle at 99 or 100%.
    shares = (SHARE_1, SHARE_2)
    results = [
        res("gpu-0", request=f"r{k}", shareID=shares[k], consumedCapacity={"memory": "4Gi", "cores": c})
        for k, c in enumerate(cores)
    ]
    (dev,) = claim_limits(plan_claim(REF, claim(results), "node-a", CATALOG), "/r").devices
    assert (dev.memory_bytes, dev.cores_percent) == (4 * GI * len(cores), 0)
