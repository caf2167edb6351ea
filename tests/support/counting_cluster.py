"""A LocalCluster that counts the claim reads and status writes made through it: what the claim status
tests (tests/unit/plugin/test_plugin_claim_status_*.py) assert about the API calls a report costs."""

from __future__ import annotations

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.claims.plan import ClaimRef

# The claim the tests report on, an entry of ours and one of another driver's.
REF = ClaimRef("ml", "c", "uid-1")
OURS = {"driver": names.DRIVER_NAME, "pool": "node-a", "device": "gpu-1"}
OTHER = {"driver": "net.example.com", "pool": "p", "device": "nic"}


class CountingCluster(LocalCluster):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.writes = 0

    def get_resource_claim(self, namespace, name):
        self.reads += 1
        return super().get_resource_claim(namespace, name)

    def update_resource_claim_status(self, obj):
        self.writes += 1
        return super().update_resource_claim_status(obj)

    def put_claim(self, name: str = "c", namespace: str = "ml", uid: str = "uid-1") -> None:
        """An allocated claim with no status.devices yet."""
        self.put_resource_claim(
            {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "status": {"allocation": {}}}
        )


def with_claim() -> CountingCluster:
    """A counting cluster holding REF's claim, allocated, with no status.devices yet."""
    cluster = CountingCluster()
    cluster.put_claim()
    return cluster
