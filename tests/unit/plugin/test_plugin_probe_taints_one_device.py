"""The gate probe's dry-run creates (what the API server is sent to find out whether it keeps device taints)
carry one probe taint in all, on the first device of the first slice that may hold one: one is enough to
tell, and the others go as they would be published."""

from __future__ import annotations

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.publisher import PROBE_TAINT, Publisher

NODE = "node-a"


def _slices(_strategies, generation):
    """A pool of three slices (as a node with many devices is split): a counter set, then two of devices."""
    pool = {"name": NODE, "generation": generation, "resourceSliceCount": 3}

    def one(name, devices):
        spec = {"driver": names.DRIVER_NAME, "nodeName": NODE, "pool": pool, "devices": devices}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": spec,
        }

    return [
        one(f"{NODE}-counters", []),
        one(f"{NODE}-0", [{"name": "gpu-0"}, {"name": "gpu-1"}]),
        one(f"{NODE}-1", [{"name": "gpu-2"}]),
    ]


def test_the_probe_sends_one_tainted_device_across_the_pools_slices():
    cluster = LocalCluster(version=(1, 36))
    sent: list[dict] = []
    real_create = cluster.create_resource_slice

    def create(obj, dry_run=False):
        if dry_run:
            sent.append(obj)
        return real_create(obj, dry_run=dry_run)

    cluster.create_resource_slice = create
    Publisher(cluster, NODE, _slices, {0: "exclusive"}, sleep=lambda _s: None).probe()
    assert len(sent) == 3
    tainted = [
        (s["metadata"]["generateName"], d["name"])
        for s in sent
        for d in s["spec"]["devices"]
        if PROBE_TAINT in (d.get("taints") or [])
    ]
    assert tainted == [(f"{NODE}-0-probe-", "gpu-0")]
