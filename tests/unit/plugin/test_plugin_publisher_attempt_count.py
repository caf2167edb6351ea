"""A publish against an API server that refuses every write tries exactly `attempts` times (the flag's
count, docs/plugin.md "Publishing"), no more: each attempt is one write the server answers, and the plugin
reports the error and tries again on its own schedule instead of hammering the server."""

from __future__ import annotations

import pytest

from driver.cluster import LocalCluster
from driver.cluster.base import ClusterError
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.publisher import Publisher, PublishError

NODE = "node-a"


@pytest.mark.parametrize("attempts", [1, 3])
def test_a_refused_publish_writes_exactly_its_attempts(attempts):
    cluster = LocalCluster(version=(1, 36))
    writes: list[bool] = []

    def refused(obj, dry_run=False):
        if not dry_run:  # the gate probe's dry runs are not attempts
            writes.append(True)
        raise ClusterError("admission webhook refused", "ResourceSlice", status=500)

    cluster.create_resource_slice = refused
    gpus = fake_node("2xA100-80GB", NODE)
    sleeps: list[float] = []
    pub = Publisher(
        cluster,
        NODE,
        lambda s, g: build_slices(NODE, gpus, s, Settings(), "1.36", g),
        {0: "exclusive", 1: "exclusive"},
        attempts=attempts,
        sleep=sleeps.append,
    )
    with pytest.raises(PublishError):
        pub.publish()
    assert len(writes) == attempts
    assert len(sleeps) == attempts - 1
