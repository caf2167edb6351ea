"""The plugin writes and clears its own status.devices entries of a claim and leaves every other driver's in
place (driver/plugin/claims/status.py, `ClaimStatusWriter`): a claim with a NIC of another DRA driver keeps
that driver's entry whatever its name and however it sorts against carve's, and carve's own entry from an
earlier write is replaced, not repeated. The claim is read back as JSON, as from the API server."""

from __future__ import annotations

import json

import pytest
from support.other_drivers import OTHER_DRIVERS

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.status import ClaimStatusWriter

REF = ClaimRef("ml", "c", "uid-1")


def _cluster_with_claim(devices: list[dict]) -> LocalCluster:
    cluster = LocalCluster()
    status = {"allocation": {"devices": {"results": []}}, "devices": devices}
    claim = {"metadata": {"name": "c", "namespace": "ml", "uid": REF.uid}, "status": status}
    cluster.put_resource_claim(json.loads(json.dumps(claim)))
    return cluster


@pytest.mark.parametrize(
    "other_driver",
    OTHER_DRIVERS,
)
def test_every_other_drivers_entry_is_kept(other_driver: str) -> None:
    other = {"driver": other_driver, "pool": "node-a", "device": "nic-0"}
    stale = {"driver": names.DRIVER_NAME, "pool": "node-a", "device": "gpu-1", "data": {"old": True}}
    cluster = _cluster_with_claim([other, stale])
    ours = {"driver": names.DRIVER_NAME, "pool": "node-a", "device": "gpu-1"}
    assert ClaimStatusWriter(cluster, sleep=lambda _s: None).write(REF, [ours])
    assert cluster.get_resource_claim("ml", "c")["status"]["devices"] == [other, ours]
    assert ClaimStatusWriter(cluster, sleep=lambda _s: None).clear(REF)
    assert cluster.get_resource_claim("ml", "c")["status"]["devices"] == [other]
