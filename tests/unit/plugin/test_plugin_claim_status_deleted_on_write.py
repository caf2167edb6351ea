"""A claim deleted between the status writer's read and its write: the write says it did not report (False,
as for a claim already gone at the read), and nothing is written or retried; the plugin's status report is
best effort for a claim that still exists (docs/plugin.md "Claim status")."""

from __future__ import annotations

from driver.cluster.base import NotFound
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.status import ClaimStatusWriter


class DeletedOnWrite:
    def __init__(self):
        self.updates = 0

    def get_resource_claim(self, namespace, name):
        return {"metadata": {"namespace": namespace, "name": name, "uid": "uid-1", "resourceVersion": "4"}}

    def update_resource_claim_status(self, body):
        self.updates += 1
        meta = body["metadata"]
        raise NotFound("not found", "ResourceClaim", meta["name"], meta["namespace"], status=404)


def test_a_claim_deleted_before_its_status_write_is_not_reported_as_written():
    cluster = DeletedOnWrite()
    sleeps: list[float] = []
    writer = ClaimStatusWriter(cluster, sleep=sleeps.append)
    entry = {"driver": "gpu.carve.dev", "pool": "node-a", "device": "gpu-0"}
    assert writer.write(ClaimRef("ns", "c", "uid-1"), [entry]) is False
    assert cluster.updates == 1 and sleeps == []
