"""LocalCluster and KubeCluster (through the real client and the HTTP stand-in) behave the same.

Every test here runs twice via the parametrized `make_cluster` fixture.
"""

from __future__ import annotations

import pytest

from driver.cluster import AlreadyExists, Cluster, Conflict, NotFound, fields_of_disabled_gates
from driver.names import DRIVER_NAME


def slice_obj(
    name: str, node: str = "node-a", driver: str = DRIVER_NAME, generation: int = 1, **device
) -> dict:
    dev = {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "vgpu"},
            "index": {"int": 0},
            "driverVersion": {"version": "580.65.6"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
        **device,
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "carve"}},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [dev],
        },
    }


SOFT_DEVICE = {
    "allowMultipleAllocations": True,
    "capacity": {
        "memory": {
            "value": "80Gi",
            "requestPolicy": {"default": "1Gi", "validRange": {"min": "256Mi", "step": "256Mi"}},
        }
    },
}


def claim_obj(name: str = "c1", namespace: str = "team-a") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": "0f6c1c9e-0000-4000-8000-000000000001"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "vgpu.carve.dev",
                            "capacity": {"requests": {"memory": "4Gi"}},
                        },
                    }
                ],
                "config": [
                    {
                        "requests": ["r"],
                        "opaque": {
                            "driver": DRIVER_NAME,
                            "parameters": {
                                "apiVersion": "gpu.carve.dev/v1alpha1",
                                "kind": "SliceConfig",
                                "priority": "low",
                            },
                        },
                    }
                ],
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "r",
                            "driver": DRIVER_NAME,
                            "pool": "node-a",
                            "device": "gpu-0",
                            "shareID": "7c2d6a1e-0000-4000-8000-00000000000a",
                            "consumedCapacity": {"memory": "4Gi"},
                        }
                    ]
                }
            }
        },
    }


def test_both_implement_the_protocol(make_cluster) -> None:
    cluster, _ = make_cluster()
    assert isinstance(cluster, Cluster)


def test_get_resource_claim_returns_spec_and_status(make_cluster) -> None:
    cluster, put_claim = make_cluster()
    put_claim(claim_obj())
    got = cluster.get_resource_claim("team-a", "c1")
    assert got["metadata"]["uid"] == "0f6c1c9e-0000-4000-8000-000000000001"
    result = got["status"]["allocation"]["devices"]["results"][0]
    assert result["shareID"] == "7c2d6a1e-0000-4000-8000-00000000000a"
    assert result["consumedCapacity"] == {"memory": "4Gi"}
    params = got["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params == {"apiVersion": "gpu.carve.dev/v1alpha1", "kind": "SliceConfig", "priority": "low"}


def test_missing_claim_raises_not_found_naming_it(make_cluster) -> None:
    cluster, _ = make_cluster()
    with pytest.raises(NotFound) as caught:
        cluster.get_resource_claim("team-a", "nope")
    assert (caught.value.kind, caught.value.namespace, caught.value.name) == (
        "ResourceClaim",
        "team-a",
        "nope",
    )
    assert "nope" in str(caught.value)


def test_create_then_get_returns_the_stored_object(make_cluster) -> None:
    cluster, _ = make_cluster()
    created = cluster.create_resource_slice(slice_obj("node-a-gpu"))
    assert created["metadata"]["resourceVersion"]
    assert created["metadata"]["uid"]
    assert created["metadata"]["generation"] == 1
    got = cluster.get_resource_slice("node-a-gpu")
    assert got == created
    assert got["spec"] == slice_obj("node-a-gpu")["spec"]


def test_create_with_generate_name_gets_a_unique_name(make_cluster) -> None:
    cluster, _ = make_cluster()
    obj = slice_obj("")
    obj["metadata"] = {"generateName": "node-a-gpu.carve.dev-"}
    names = {cluster.create_resource_slice(obj)["metadata"]["name"] for _ in range(3)}
    assert len(names) == 3
    assert all(
        n.startswith("node-a-gpu.carve.dev-") and len(n) == len("node-a-gpu.carve.dev-") + 5 for n in names
    )


def test_create_of_an_existing_name_is_already_exists(make_cluster) -> None:
    cluster, _ = make_cluster()
    cluster.create_resource_slice(slice_obj("s"))
    with pytest.raises(AlreadyExists) as caught:
        cluster.create_resource_slice(slice_obj("s"))
    assert isinstance(caught.value, Conflict)
    assert caught.value.name == "s"


def test_list_filters_by_driver_and_node_and_sorts_by_name(make_cluster) -> None:
    cluster, _ = make_cluster()
    cluster.create_resource_slice(slice_obj("b-node-a", "node-a"))
    cluster.create_resource_slice(slice_obj("a-node-a", "node-a"))
    cluster.create_resource_slice(slice_obj("c-node-b", "node-b"))
    cluster.create_resource_slice(slice_obj("d-other", "node-a", driver="gpu.nvidia.com"))
    assert [s["metadata"]["name"] for s in cluster.list_resource_slices(DRIVER_NAME, "node-a")] == [
        "a-node-a",
        "b-node-a",
    ]
    assert [s["metadata"]["name"] for s in cluster.list_resource_slices(DRIVER_NAME)] == [
        "a-node-a",
        "b-node-a",
        "c-node-b",
    ]
    listed = cluster.list_resource_slices(DRIVER_NAME, "node-a")[0]
    assert (listed["apiVersion"], listed["kind"]) == ("resource.k8s.io/v1", "ResourceSlice")
    assert listed == cluster.get_resource_slice("a-node-a")


def test_update_with_current_resource_version_bumps_it_and_the_generation(make_cluster) -> None:
    cluster, _ = make_cluster()
    created = cluster.create_resource_slice(slice_obj("s"))
    changed = dict(created, spec=slice_obj("s", generation=2)["spec"])
    updated = cluster.update_resource_slice(changed)
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert updated["metadata"]["generation"] == 2
    assert updated["spec"]["pool"]["generation"] == 2
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]


def test_update_without_spec_change_keeps_the_generation(make_cluster) -> None:
    cluster, _ = make_cluster()
    created = cluster.create_resource_slice(slice_obj("s"))
    relabeled = dict(created, metadata=dict(created["metadata"], labels={"x": "y"}))
    assert cluster.update_resource_slice(relabeled)["metadata"]["generation"] == 1


def test_update_with_stale_resource_version_is_a_conflict(make_cluster) -> None:
    cluster, _ = make_cluster()
    created = cluster.create_resource_slice(slice_obj("s"))
    cluster.update_resource_slice(dict(created, spec=slice_obj("s", generation=2)["spec"]))
    with pytest.raises(Conflict) as caught:
        cluster.update_resource_slice(dict(created, spec=slice_obj("s", generation=3)["spec"]))
    assert not isinstance(caught.value, AlreadyExists)
    assert (caught.value.kind, caught.value.name, caught.value.status) == ("ResourceSlice", "s", 409)
    assert cluster.get_resource_slice("s")["spec"]["pool"]["generation"] == 2


def test_update_without_resource_version_is_unconditional(make_cluster) -> None:
    cluster, _ = make_cluster()
    created = cluster.create_resource_slice(slice_obj("s"))
    cluster.update_resource_slice(slice_obj("s", generation=5))
    got = cluster.get_resource_slice("s")
    assert got["spec"]["pool"]["generation"] == 5
    # the client sent no identity: the server keeps the object's own
    for key in ("uid", "creationTimestamp"):
        assert got["metadata"][key] == created["metadata"][key], key


def test_update_of_a_missing_slice_is_not_found(make_cluster) -> None:
    cluster, _ = make_cluster()
    with pytest.raises(NotFound):
        cluster.update_resource_slice(slice_obj("ghost"))


def test_delete_removes_and_a_second_delete_is_not_found(make_cluster) -> None:
    cluster, _ = make_cluster()
    cluster.create_resource_slice(slice_obj("s"))
    cluster.delete_resource_slice("s")
    assert cluster.list_resource_slices(DRIVER_NAME) == []
    with pytest.raises(NotFound) as caught:
        cluster.delete_resource_slice("s")
    assert caught.value.name == "s"
    with pytest.raises(NotFound):
        cluster.get_resource_slice("s")


def test_gated_fields_survive_when_gates_are_on(make_cluster) -> None:
    cluster, _ = make_cluster()
    stored = cluster.create_resource_slice(slice_obj("s", **SOFT_DEVICE))
    device = stored["spec"]["devices"][0]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "256Mi"


def test_disabled_consumable_capacity_gate_drops_its_fields_silently(make_cluster) -> None:
    cluster, _ = make_cluster(drop_fields=fields_of_disabled_gates(["DRAConsumableCapacity"]))
    stored = cluster.create_resource_slice(slice_obj("s", **SOFT_DEVICE))
    device = stored["spec"]["devices"][0]
    assert "allowMultipleAllocations" not in device
    assert device["capacity"]["memory"] == {"value": "80Gi"}
    assert cluster.get_resource_slice("s")["spec"]["devices"][0] == device


def test_disabled_partitionable_gate_drops_counters_on_update_too(make_cluster) -> None:
    cluster, _ = make_cluster(drop_fields=fields_of_disabled_gates(["DRAPartitionableDevices"]))
    created = cluster.create_resource_slice(slice_obj("s"))
    counters = {"memory": {"value": "80Gi"}}
    spec = slice_obj("s", consumesCounters=[{"counterSet": "gpu-0-counters", "counters": counters}])["spec"]
    spec["sharedCounters"] = [{"name": "gpu-0-counters", "counters": counters}]
    updated = cluster.update_resource_slice(dict(created, spec=spec))
    assert "sharedCounters" not in updated["spec"]
    assert "consumesCounters" not in updated["spec"]["devices"][0]


def test_server_version(make_cluster) -> None:
    cluster, _ = make_cluster(version=(1, 35))
    assert cluster.server_version() == (1, 35)


def test_dry_run_create_answers_what_would_be_stored_and_stores_nothing(make_cluster) -> None:
    cluster, _ = make_cluster(drop_fields=fields_of_disabled_gates(["DRAConsumableCapacity"]))
    obj = slice_obj("s1", allowMultipleAllocations=True)
    got = cluster.create_resource_slice(obj, dry_run=True)
    assert "allowMultipleAllocations" not in got["spec"]["devices"][0]
    assert got["spec"]["devices"][0]["name"] == "gpu-0"
    assert cluster.list_resource_slices(DRIVER_NAME) == []
    cluster.create_resource_slice(obj)  # the name is still free
