"""A claim's status write that keeps losing the race (409 Conflict at every write, another writer always
ahead) is tried four times, each after a fresh read, with a doubling pause between tries (50, 100, 200
ms), and then given up (False): a contended claim costs the plugin a bounded number of round trips."""

from __future__ import annotations

from typing import Any

from driver.cluster.base import Conflict
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.status import ClaimStatusWriter


class AlwaysConflicting:
    def __init__(self) -> None:
        self.reads = 0
        self.updates = 0

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        meta = {"namespace": namespace, "name": name, "uid": "uid-1", "resourceVersion": str(self.reads)}
        return {"metadata": meta}

    def update_resource_claim_status(self, body: dict[str, Any]) -> dict[str, Any]:
        self.updates += 1
        meta = body["metadata"]
        raise Conflict("conflict", "ResourceClaim", meta["name"], meta["namespace"], status=409)


def test_a_write_that_always_conflicts_is_tried_four_times_then_given_up() -> None:
    cluster = AlwaysConflicting()
    sleeps: list[float] = []
    writer = ClaimStatusWriter(cluster, sleep=sleeps.append)
    entry = {"driver": "gpu.carve.dev", "pool": "node-a", "device": "gpu-0"}
    assert writer.write(ClaimRef("ns", "c", "uid-1"), [entry]) is False
    assert (cluster.reads, cluster.updates) == (4, 4)
    assert sleeps == [0.05, 0.1, 0.2]
