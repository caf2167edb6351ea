"""The file-backed cluster (`carve plugin --cluster file:<dir>`, driver/plugin/filecluster.py) as the plugin
and a second process see it: a claim's status write replaces the status only, bumps the resourceVersion
and keeps everything else, and a stale one is a 409 that writes nothing, as the API server (and
LocalCluster) do; a claim written without a namespace lands in `default`; slices are listed by driver and
node; a dry-run create stores nothing; an update keeps the slice's uid; Events are stored under their
namespace for `kubectl get events`. What one FileCluster writes, another over the same directory reads."""

from __future__ import annotations

import json

import pytest

from driver.cluster.base import AlreadyExists, Conflict, NotFound
from driver.plugin.filecluster import FileCluster

DRIVER = "gpu.carve.dev"


def _claim(name: str, **meta) -> dict:
    return {"metadata": {"name": name, **meta}, "spec": {"devices": {"requests": [{"name": "gpu"}]}}}


def _slice(name: str, node: str, driver: str = DRIVER) -> dict:
    return {"metadata": {"name": name}, "spec": {"driver": driver, "nodeName": node, "devices": []}}


def test_a_claim_put_without_a_namespace_or_uid_gets_default_a_uid_and_a_version(tmp_path):
    cluster = FileCluster(tmp_path)
    put = cluster.put_resource_claim(_claim("c"))
    meta = put["metadata"]
    assert (meta["namespace"], put["kind"]) == ("default", "ResourceClaim") and len(meta["uid"]) == 36
    assert int(meta["resourceVersion"]) >= 1
    read = FileCluster(tmp_path).get_resource_claim("default", "c")  # another process, same directory
    assert read == put
    kept = cluster.put_resource_claim(_claim("d", namespace="team", uid="u-1"))["metadata"]
    assert (kept["namespace"], kept["uid"]) == ("team", "u-1")
    assert int(kept["resourceVersion"]) == int(meta["resourceVersion"]) + 1
    assert json.loads((tmp_path / "resourceclaims" / "team" / "d.json").read_text())["metadata"] == kept


def test_a_status_write_replaces_only_the_status_and_bumps_the_version(tmp_path):
    cluster = FileCluster(tmp_path)
    put = cluster.put_resource_claim(_claim("c", namespace="team", uid="u-1"))
    status = {"allocation": {"devices": {"results": [{"device": "gpu-0"}]}}}
    # what the plugin sends: its copy of the claim, with another spec it must not write
    sent = {**put, "spec": {"changed": True}, "status": status}
    stored = cluster.update_resource_claim_status(sent)
    assert stored["status"] == status and stored["spec"] == put["spec"]
    assert {k: v for k, v in stored["metadata"].items() if k != "resourceVersion"} == {
        k: v for k, v in put["metadata"].items() if k != "resourceVersion"
    }
    assert int(stored["metadata"]["resourceVersion"]) == int(put["metadata"]["resourceVersion"]) + 1
    assert cluster.get_resource_claim("team", "c") == stored
    status["allocation"] = "changed by the caller afterwards"
    assert cluster.get_resource_claim("team", "c")["status"]["allocation"] != status["allocation"]
    # a write without a status clears it, as a PUT of the status subresource does
    cleared = cluster.update_resource_claim_status({"metadata": {"namespace": "team", "name": "c"}})
    assert cleared["status"] == {}


def test_a_stale_status_write_is_a_409_naming_the_claim_and_writes_nothing(tmp_path):
    cluster = FileCluster(tmp_path)
    put = cluster.put_resource_claim(_claim("c"))
    first = cluster.update_resource_claim_status({**put, "status": {"n": 1}})
    stale = {**put, "status": {"n": 2}}  # the version before the first status write
    with pytest.raises(
        Conflict,
        match=f"resourceclaims default/c: resourceVersion {put['metadata']['resourceVersion']} is stale",
    ) as e:
        cluster.update_resource_claim_status(stale)
    assert (e.value.status, e.value.namespace, e.value.name) == (409, "default", "c")
    assert cluster.get_resource_claim("default", "c") == first
    # a write naming no namespace is of the claim in "default"
    second = cluster.update_resource_claim_status({"metadata": {"name": "c"}, "status": {"n": 3}})
    assert second["status"] == {"n": 3}


def test_a_status_write_or_delete_of_a_missing_claim_is_a_404(tmp_path):
    cluster = FileCluster(tmp_path)
    with pytest.raises(NotFound, match="resourceclaims team/c not found") as e:
        cluster.update_resource_claim_status({"metadata": {"namespace": "team", "name": "c"}, "status": {}})
    assert e.value.status == 404
    with pytest.raises(NotFound, match="resourceclaims team/c not found"):
        cluster.delete_resource_claim("team", "c")
    cluster.put_resource_claim(_claim("c", namespace="team"))
    cluster.delete_resource_claim("team", "c")
    with pytest.raises(NotFound):
        cluster.get_resource_claim("team", "c")


def test_slices_are_listed_by_driver_and_node(tmp_path):
    cluster = FileCluster(tmp_path)
    cluster.create_resource_slice(_slice("b-n1", "n1"))
    cluster.create_resource_slice(_slice("a-n2", "n2"))
    cluster.create_resource_slice(_slice("c-other", "n1", driver="other.example.com"))
    names = lambda items: [s["metadata"]["name"] for s in items]  # noqa: E731
    assert names(cluster.list_resource_slices(DRIVER)) == ["a-n2", "b-n1"]  # every node, by name
    assert names(cluster.list_resource_slices(DRIVER, "n1")) == ["b-n1"]
    assert names(cluster.list_resource_slices(DRIVER, "n3")) == []
    assert names(cluster.list_resource_slices("other.example.com", "n1")) == ["c-other"]


def test_a_dry_run_create_stores_nothing_and_a_second_create_is_already_exists(tmp_path):
    cluster = FileCluster(tmp_path)
    answer = cluster.create_resource_slice(_slice("s", "n1"), dry_run=True)
    assert answer == _slice("s", "n1")
    assert cluster.list_resource_slices(DRIVER) == [] and not (tmp_path / ".resourceVersion").exists()
    made = cluster.create_resource_slice(_slice("s", "n1"))
    assert (made["kind"], made["apiVersion"]) == ("ResourceSlice", "resource.k8s.io/v1")
    with pytest.raises(AlreadyExists, match="resourceslices 's' already exists") as e:
        cluster.create_resource_slice(_slice("s", "n2"))
    assert e.value.status == 409
    assert cluster.get_resource_slice("s") == made


def test_an_update_keeps_the_slices_uid_and_a_delete_of_a_missing_slice_is_a_404(tmp_path):
    cluster = FileCluster(tmp_path)
    made = cluster.create_resource_slice(_slice("s", "n1"))
    sent = {
        **made,
        "metadata": {**made["metadata"], "uid": "forged"},
        "spec": {**made["spec"], "nodeName": "n2"},
    }
    updated = cluster.update_resource_slice(sent)
    assert updated["metadata"]["uid"] == made["metadata"]["uid"] and updated["spec"]["nodeName"] == "n2"
    assert int(updated["metadata"]["resourceVersion"]) == int(made["metadata"]["resourceVersion"]) + 1
    assert cluster.get_resource_slice("s") == updated
    cluster.delete_resource_slice("s")
    with pytest.raises(NotFound, match="resourceslices 's' not found") as e:
        cluster.delete_resource_slice("s")
    assert e.value.status == 404


def test_an_event_is_stored_under_its_namespace_with_its_body(tmp_path):
    cluster = FileCluster(tmp_path)
    body = {"metadata": {"generateName": "c."}, "reason": "GpuMemoryOverQuota", "message": "m"}
    cluster.create_event("team", body)
    cluster.create_event("team", body)
    files = sorted((tmp_path / "events").glob("team.*.json"))
    assert len(files) == 2  # one file per Event, never overwritten
    stored = json.loads(files[0].read_text())
    assert stored == {**body, "metadata": {"generateName": "c.", "namespace": "team"}}
    assert body["metadata"] == {"generateName": "c."}  # the caller's object is not changed


def test_an_object_update_keeps_its_identity_and_bumps_its_version(tmp_path):
    cluster = FileCluster(tmp_path)
    made = cluster.create_object("nodepartitionings", {"metadata": {"name": "n1"}, "spec": {"a": 1}})
    updated = cluster.update_object("nodepartitionings", {**made, "spec": {"a": 2}})
    assert updated["metadata"]["uid"] == made["metadata"]["uid"] and updated["spec"] == {"a": 2}
    assert int(updated["metadata"]["resourceVersion"]) == int(made["metadata"]["resourceVersion"]) + 1
    assert FileCluster(tmp_path).get_object("nodepartitionings", "n1") == updated
    with pytest.raises(Conflict):
        cluster.update_object("nodepartitionings", made)  # made's version is stale now
    assert cluster.get_object("nodepartitionings", "n1") == updated
