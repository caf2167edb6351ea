"""A claim whose soft slices and slots resolve to different SliceConfigs is refused with an error naming both
devices, the one that differs and the first one it was compared with, so its author finds which request's
config to change (driver/plugin/claims/plan.py)."""

from __future__ import annotations

import pytest

from driver import names
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef, PrepareError, plan_claim

GI = 1024**3
REF = ClaimRef("ml", "train", "uid-1")
CATALOG = {
    f"gpu-1-slot-{i}": NodeDevice(
        f"gpu-1-slot-{i}", names.TYPE_SLOT, "GPU-1", 1, {"memory": 8 * GI, "cores": 10}
    )
    for i in range(3)
}


def _config(requests, **params):
    return {
        "source": "FromClaim",
        "requests": requests,
        "opaque": {
            "driver": names.DRIVER_NAME,
            "parameters": {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", **params},
        },
    }


def test_the_error_names_the_device_that_differs_and_the_first_device():
    results = [
        {"request": r, "driver": names.DRIVER_NAME, "pool": "node-a", "device": f"gpu-1-slot-{i}"}
        for i, r in enumerate(("a", "b", "c"))
    ]
    claim = {
        "metadata": {"uid": "uid-1", "name": "train", "namespace": "ml"},
        "status": {
            "allocation": {"devices": {"results": results, "config": [_config(["c"], priority="low")]}}
        },
    }
    with pytest.raises(PrepareError) as e:
        plan_claim(REF, claim, "node-a", CATALOG)
    assert str(e.value) == (
        f"{REF}: device gpu-1-slot-2: config: differs from the config of device gpu-1-slot-0; soft "
        "slices and slots of one claim need the same SliceConfig"
    )
