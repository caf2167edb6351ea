"""A share's memory is the driver's to enforce only when its `memoryEnforcement` attribute is exactly
`driver`, the test `vgpu-strict.carve.dev`'s selector makes (docs/enforcement.md:
`memoryEnforcement == "driver"`). Any other value, one this plugin never publishes but another carve version
on the node or in the cluster may have left in a slice, is the limiter's: the claim gets no driver memory
partition (the hook would set no cgroup limit), and a burst past the request, which only a driver-enforced
MPS share may take, is refused. Values sorting before and after `driver` are both tried, since the check
must be an equality, not an order."""

from __future__ import annotations

import json

import pytest

from driver import names
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.claims.plan import ClaimRef, PrepareError, memory_partitions, plan_claim

NODE = "node-a"
REF = ClaimRef("ml", "train", "uid-1")
UUID = "GPU-11111111-2222-3333-4444-555555555555"
GIB = 1 << 30


def catalog_with(kind: str, enforcement: str) -> dict:
    # Built as the API server's JSON is read back: every string a fresh object.
    text = json.dumps(
        {
            "spec": {
                "devices": [
                    {
                        "name": f"gpu-0-{kind}-0",
                        "attributes": {
                            "type": {"string": kind},
                            "minor": {"int": 0},
                            "uuid": {"string": UUID},
                            names.MEMORY_ENFORCEMENT_ATTRIBUTE: {"string": enforcement},
                        },
                    }
                ]
            }
        }
    )
    return catalog_from_slices([json.loads(text)])


def claim(kind: str, memory_limit: str | None = None) -> dict:
    result = {
        "request": "r",
        "driver": names.DRIVER_NAME,
        "pool": NODE,
        "device": f"gpu-0-{kind}-0",
        "consumedCapacity": {"memory": "4Gi"},
    }
    devices: dict = {"results": [result]}
    if memory_limit is not None:
        params = {"apiVersion": "gpu.carve.dev/v1alpha1", "kind": "SliceConfig", "memoryLimit": memory_limit}
        devices["config"] = [
            {
                "source": "FromClaim",
                "requests": [],
                "opaque": {"driver": names.DRIVER_NAME, "parameters": params},
            }
        ]
    return {
        "metadata": {"uid": REF.uid, "name": REF.name, "namespace": REF.namespace},
        "status": {"allocation": {"devices": devices}},
    }


# "Driver", "auto", "cgroup" sort before "driver"; "limiter", "partition" after it.
OTHERS = ["Driver", "auto", "cgroup", "limiter", "partition"]


@pytest.mark.parametrize("kind", [names.TYPE_VGPU, names.TYPE_MPS])
def test_driver_gets_the_partition(kind: str) -> None:
    plan = plan_claim(REF, claim(kind), NODE, catalog_with(kind, "driver"))
    parts = memory_partitions(plan)
    assert [(p.gpu_uuid, p.soft, p.hard) for p in parts] == [(UUID, 4 * GIB, 4 * GIB)]


@pytest.mark.parametrize("enforcement", OTHERS)
@pytest.mark.parametrize("kind", [names.TYPE_VGPU, names.TYPE_MPS])
def test_any_other_value_gets_none(kind: str, enforcement: str) -> None:
    catalog = catalog_with(kind, enforcement)
    assert not catalog[f"gpu-0-{kind}-0"].driver_enforced
    assert memory_partitions(plan_claim(REF, claim(kind), NODE, catalog)) == ()


@pytest.mark.parametrize("enforcement", OTHERS)
def test_a_burst_is_refused_for_its_backend_unless_the_driver_enforces_it(enforcement: str) -> None:
    kind = names.TYPE_MPS
    # A driver-enforced MPS share passes the backend check and meets the class's ratio (default 1) next.
    with pytest.raises(PrepareError, match="maxMemoryLimitRatio") as driver:
        plan_claim(REF, claim(kind, "6Gi"), NODE, catalog_with(kind, "driver"))
    assert "memory enforced by" not in str(driver.value)
    with pytest.raises(PrepareError, match=f"memory enforced by the {enforcement}\\)"):
        plan_claim(REF, claim(kind, "6Gi"), NODE, catalog_with(kind, enforcement))
