"""LocalCluster specifics: isolation of returned objects, claim helpers, concurrency and conflicts."""

from __future__ import annotations

import threading

import pytest

from driver.cluster import Conflict, LocalCluster, NotFound
from driver.names import DRIVER_NAME


def slice_obj(name: str, generation: int = 1) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


def test_returned_objects_are_copies() -> None:
    cluster = LocalCluster()
    created = cluster.create_resource_slice(slice_obj("s"))
    created["spec"]["devices"].clear()
    cluster.list_resource_slices(DRIVER_NAME)[0]["spec"]["driver"] = "mutated"
    assert cluster.get_resource_slice("s")["spec"] == slice_obj("s")["spec"]


def test_input_object_is_not_modified() -> None:
    cluster = LocalCluster(drop_fields={"allowMultipleAllocations"})
    obj = slice_obj("s")
    obj["spec"]["devices"][0]["allowMultipleAllocations"] = True
    cluster.create_resource_slice(obj)
    assert obj["spec"]["devices"][0]["allowMultipleAllocations"] is True
    assert "resourceVersion" not in obj["metadata"]


def test_resource_version_grows_across_all_objects() -> None:
    cluster = LocalCluster()
    versions = [
        int(cluster.create_resource_slice(slice_obj(f"s{i}"))["metadata"]["resourceVersion"])
        for i in range(3)
    ]
    versions.append(
        int(cluster.put_resource_claim({"metadata": {"name": "c"}})["metadata"]["resourceVersion"])
    )
    assert versions == sorted(versions) and len(set(versions)) == 4


def test_put_resource_claim_keeps_the_uid_across_updates_and_defaults_the_namespace() -> None:
    cluster = LocalCluster()
    first = cluster.put_resource_claim({"metadata": {"name": "c"}, "spec": {}})
    second = cluster.put_resource_claim({"metadata": {"name": "c"}, "status": {"allocation": {}}})
    assert first["metadata"]["namespace"] == "default"
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    assert cluster.get_resource_claim("default", "c")["status"] == {"allocation": {}}


def test_delete_resource_claim() -> None:
    cluster = LocalCluster()
    cluster.put_resource_claim({"metadata": {"name": "c", "namespace": "ns"}})
    cluster.delete_resource_claim("ns", "c")
    with pytest.raises(NotFound):
        cluster.get_resource_claim("ns", "c")


def test_drop_fields_must_name_gated_fields() -> None:
    with pytest.raises(ValueError, match="devices"):
        LocalCluster(drop_fields={"devices"})


def test_concurrent_read_modify_write_with_retry_loses_no_update() -> None:
    cluster = LocalCluster()
    cluster.create_resource_slice(slice_obj("s", generation=0))
    conflicts = 0
    lock = threading.Lock()

    def bump(times: int) -> None:
        nonlocal conflicts
        for _ in range(times):
            while True:
                current = cluster.get_resource_slice("s")
                current["spec"]["pool"]["generation"] += 1
                try:
                    cluster.update_resource_slice(current)
                    break
                except Conflict:
                    with lock:
                        conflicts += 1

    threads = [threading.Thread(target=bump, args=(50,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cluster.get_resource_slice("s")["spec"]["pool"]["generation"] == 400
    print(f"conflicts retried: {conflicts}")


def test_conflict_names_both_resource_versions() -> None:
    cluster = LocalCluster()
    created = cluster.create_resource_slice(slice_obj("s"))
    cluster.update_resource_slice(created)
    with pytest.raises(Conflict) as caught:
        cluster.update_resource_slice(created)
    assert created["metadata"]["resourceVersion"] in str(caught.value)
