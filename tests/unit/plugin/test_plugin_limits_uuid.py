"""Every soft slice and slot a claim gets carries its GPU's UUID into the claim's limits (pure).

The limiter finds a GPU's quota by that UUID when a container has several soft claims
(docs/plugin.md, "Several claims in one container"), so a limit without it would be charged by position.
"""

from __future__ import annotations

import dataclasses

import pytest

from driver import names
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.claims.catalog import catalog_from_slices
from driver.plugin.claims.plan import ClaimRef, PrepareError, claim_limits, plan_claim

NODE = "node-a"
REF = ClaimRef("ml", "train", "uid-1")


def claim(*results: dict) -> dict:
    return {
        "metadata": {"uid": REF.uid, "name": REF.name, "namespace": REF.namespace},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def result(device: str, **extra) -> dict:
    return {"request": "r", "driver": names.DRIVER_NAME, "pool": NODE, "device": device, **extra}


@pytest.mark.parametrize("strategy", [names.STRATEGY_SOFT, names.STRATEGY_SLOTS])
def test_limits_of_every_limited_device_name_its_gpu(strategy):
    gpus = fake_node("2xA100-80GB,1xT4", NODE)
    slices = build_slices(NODE, gpus, dict.fromkeys(range(3), strategy), Settings(), "1.36")
    catalog = catalog_from_slices(slices)
    limited = [d for d in catalog.values() if d.is_limited]
    assert {d.gpu_uuid for d in limited} == {g.uuid for g in gpus}
    # one device per GPU (a share of a soft device, or the first slot of each GPU)
    firsts = {d.gpu_uuid: d for d in sorted(limited, key=lambda d: d.name)}
    results = [
        result(
            d.name,
            shareID=f"00000000-0000-4000-8000-{i:012d}",
            consumedCapacity={"memory": "1Gi", "cores": "10"},
        )
        if d.type == names.TYPE_VGPU
        else result(d.name)
        for i, d in enumerate(firsts.values())
    ]
    limits = claim_limits(plan_claim(REF, claim(*results), NODE, catalog), "/var/run/carve/uid-1/region")
    assert sorted(d.uuid for d in limits.devices) == sorted(g.uuid for g in gpus)


def test_a_limited_device_without_a_gpu_uuid_is_refused():
    gpus = fake_node("1xT4", NODE)
    catalog = catalog_from_slices(build_slices(NODE, gpus, {0: names.STRATEGY_SLOTS}, Settings(), "1.36"))
    name = next(n for n, d in catalog.items() if d.is_limited)
    catalog[name] = dataclasses.replace(catalog[name], gpu_uuid="")
    with pytest.raises(PrepareError, match=rf"device {name}: attributes\.uuid: missing"):
        claim_limits(plan_claim(REF, claim(result(name)), NODE, catalog), "/r")
