"""A claim allocated by several DRA drivers (a GPU of carve's and a NIC of another driver, in the same
node-named pool, as most drivers name their pools) is planned with carve's results only, whatever the other
driver's name is and however it sorts against carve's (driver/plugin/claims/plan.py, `plan_claim`): the
NIC's result is its own driver's to prepare, and taking it would fail the prepare on a device this node's
slices do not hold."""

from __future__ import annotations

import json

import pytest
from support.other_drivers import OTHER_DRIVERS

from driver import names
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.claims.plan import ClaimRef, plan_claim

NODE = "node-a"
REF = ClaimRef("ml", "train", "uid-1")


def _fresh(value: object) -> object:
    # What the API hands the plugin: JSON parsed at run time.
    return json.loads(json.dumps(value))


def _catalog() -> dict:
    device = {
        "name": "gpu-0",
        "attributes": {"type": {"string": names.TYPE_GPU}, "minor": {"int": 0}, "uuid": {"string": "GPU-0"}},
        "capacity": {"memory": {"value": "80Gi"}},
    }
    return catalog_from_slices([_fresh({"spec": {"devices": [device]}})])


@pytest.mark.parametrize(
    "other",
    OTHER_DRIVERS,
)
def test_only_carves_results_are_planned(other: str) -> None:
    results = [
        {"request": "nic", "driver": other, "pool": NODE, "device": "nic-0"},
        {"request": "gpu", "driver": names.DRIVER_NAME, "pool": NODE, "device": "gpu-0"},
    ]
    claim = _fresh(
        {
            "metadata": {"uid": REF.uid, "name": REF.name, "namespace": REF.namespace},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )
    plan = plan_claim(REF, claim, NODE, _catalog())
    assert [(p.device.name, p.request) for p in plan.devices] == [("gpu-0", "gpu")]
