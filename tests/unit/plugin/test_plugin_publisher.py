"""Publishing against LocalCluster: create, no-op, generation bump, stale slices, conflicts, gates off."""

from __future__ import annotations

from driver import names
from driver.cluster import LocalCluster, fields_of_disabled_gates
from driver.cluster.base import ClusterError, Conflict
from driver.devices import Settings, build_slices
from driver.devices.catalog import fake_node
from driver.plugin.publisher import GATE_CONSUMABLE, GATE_PARTITIONABLE, Publisher, fallback

NODE = "node-a"


def make(cluster, strategies, gpus=None, sleep=None):
    gpus = gpus or fake_node("2xA100-80GB,1xT4", NODE)
    return Publisher(
        cluster,
        NODE,
        lambda s, g: build_slices(NODE, gpus, s, Settings(), "1.36", g),
        strategies,
        sleep=sleep or (lambda _s: None),
    )


def generations(cluster):
    return {s["spec"]["pool"]["generation"] for s in cluster.list_resource_slices(names.DRIVER_NAME, NODE)}


def test_first_publish_creates_the_pool_at_generation_1():
    cluster = LocalCluster(version=(1, 36))
    stored = make(cluster, {0: "mig", 1: "soft", 2: "exclusive"}).publish()
    assert stored and generations(cluster) == {1}


def test_unchanged_pool_is_not_rewritten():
    cluster = LocalCluster(version=(1, 36))
    make(cluster, {0: "soft", 1: "soft", 2: "exclusive"}).publish()
    before = [s["metadata"]["resourceVersion"] for s in cluster.list_resource_slices(names.DRIVER_NAME, NODE)]
    make(cluster, {0: "soft", 1: "soft", 2: "exclusive"}).publish()  # a restarted plugin
    after = [s["metadata"]["resourceVersion"] for s in cluster.list_resource_slices(names.DRIVER_NAME, NODE)]
    assert before == after and generations(cluster) == {1}


def test_change_bumps_the_generation_and_deletes_stale_slices():
    cluster = LocalCluster(version=(1, 36))
    make(cluster, {0: "mig", 1: "soft", 2: "exclusive"}).publish()
    n_before = len(cluster.list_resource_slices(names.DRIVER_NAME, NODE))
    make(cluster, {0: "exclusive", 1: "exclusive", 2: "exclusive"}).publish()
    slices = cluster.list_resource_slices(names.DRIVER_NAME, NODE)
    assert generations(cluster) == {2}
    assert len(slices) < n_before  # the counter-set slice of the MIG GPU is gone
    assert all(s["spec"]["pool"]["resourceSliceCount"] == len(slices) for s in slices)


def test_conflicts_are_retried_with_backoff():
    cluster = LocalCluster(version=(1, 36))
    make(cluster, {0: "exclusive", 1: "exclusive", 2: "exclusive"}).publish()
    real_update = cluster.update_resource_slice
    failures = iter([True, True])

    def flaky(obj):
        if next(failures, False):
            raise Conflict("modified", "ResourceSlice", obj["metadata"]["name"], status=409)
        return real_update(obj)

    cluster.update_resource_slice = flaky
    sleeps: list[float] = []
    make(cluster, {0: "soft", 1: "soft", 2: "exclusive"}, sleep=sleeps.append).publish()
    assert sleeps == [0.1, 0.2]
    assert generations(cluster) == {2}


def test_gates_off_fall_back_to_slots_and_whole_gpus():
    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_CONSUMABLE, GATE_PARTITIONABLE]))
    pub = make(cluster, {0: "mig", 1: "soft", 2: "timeslice"})
    stored = pub.publish()
    assert pub.gates_off == {GATE_CONSUMABLE, GATE_PARTITIONABLE}
    assert pub.effective == {0: "exclusive", 1: "slots", 2: "exclusive"}
    device_names = {d["name"] for s in stored for d in s["spec"].get("devices", [])}
    assert "gpu-1-slot-0" in device_names and not any("-mig-" in n for n in device_names)
    assert not any(s["spec"].get("sharedCounters") for s in stored)


def test_gates_off_are_announced_once_with_the_strategies_they_changed():
    # Issue 29: a default 1.34/1.35 cluster got whole GPUs and slots with only a log line to say so.
    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_CONSUMABLE, GATE_PARTITIONABLE]))
    told: list[tuple[set[str], dict[int, str]]] = []
    pub = make(cluster, {0: "mig", 1: "soft", 2: "exclusive"})
    pub.on_gates_off = lambda gates, changed: told.append((gates, changed))
    pub.publish()
    pub.publish()
    assert told == [({GATE_CONSUMABLE, GATE_PARTITIONABLE}, {0: "mig->exclusive", 1: "soft->slots"})]


def test_gates_off_are_found_by_a_dry_run_so_the_pool_is_written_once():
    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_CONSUMABLE, GATE_PARTITIONABLE]))
    written: list[dict] = []
    real_create = cluster.create_resource_slice

    def recording(obj, dry_run=False):
        if not dry_run:
            written.append(obj)
        return real_create(obj, dry_run=dry_run)

    cluster.create_resource_slice = recording
    pub = make(cluster, {0: "mig", 1: "soft", 2: "timeslice"})
    pub.publish()
    assert pub.effective == {0: "exclusive", 1: "slots", 2: "exclusive"}
    assert generations(cluster) == {1}  # no first generation with devices the node cannot serve
    for obj in written:
        assert not obj["spec"].get("sharedCounters")
        assert not any(d.get("allowMultipleAllocations") for d in obj["spec"].get("devices", []))
    assert not any("probe" in s["metadata"]["name"] for s in cluster.list_resource_slices(names.DRIVER_NAME))


def test_failed_dry_run_falls_back_to_reading_back_the_write():
    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_CONSUMABLE]))
    real_create = cluster.create_resource_slice

    def no_dry_run(obj, dry_run=False):
        if dry_run:
            raise ClusterError("dry run refused", "ResourceSlice", status=403)
        return real_create(obj)

    cluster.create_resource_slice = no_dry_run
    pub = make(cluster, {0: "soft", 1: "soft", 2: "exclusive"})
    stored = pub.publish()
    assert pub.gates_off == {GATE_CONSUMABLE}
    assert {d["name"] for s in stored for d in s["spec"].get("devices", [])} >= {
        "gpu-0-slot-0",
        "gpu-1-slot-0",
    }


def test_fallback_keeps_strategies_the_gate_does_not_touch():
    assert fallback({0: "mig", 1: "soft"}, {GATE_CONSUMABLE}) == {0: "mig", 1: "slots"}
    assert fallback({0: "mig", 1: "soft"}, {GATE_PARTITIONABLE}) == {0: "exclusive", 1: "soft"}
