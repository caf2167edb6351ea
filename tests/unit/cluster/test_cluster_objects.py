"""ObjectStore (LocalCluster's and the API stand-in's store of the controller's kinds): the write semantics
the controller relies on, and the watch log."""

from __future__ import annotations

import threading

import pytest

from driver.cluster import Conflict, Expired, LocalCluster, NotFound
from driver.cluster.base import AlreadyExists
from driver.cluster.objects import ObjectStore


def _np(name: str = "n1", strategy: str = "mig") -> dict:
    return {
        "apiVersion": "carve.dev/v1alpha1",
        "kind": "NodePartitioning",
        "metadata": {"name": name},
        "spec": {"gpus": [{"index": 0, "strategy": strategy}]},
    }


def test_create_update_and_stale_writes() -> None:
    store = ObjectStore()
    made = store.create("nodepartitionings", _np())
    assert made["metadata"]["generation"] == 1
    with pytest.raises(AlreadyExists):
        store.create("nodepartitionings", _np())
    newer = store.update("nodepartitionings", {**made, "spec": {"gpus": [{"index": 0, "strategy": "soft"}]}})
    assert newer["metadata"]["generation"] == 2
    with pytest.raises(Conflict):
        store.update("nodepartitionings", made)  # made's resourceVersion is stale
    with pytest.raises(NotFound):
        store.get("nodepartitionings", "", "n2")


def test_status_is_a_subresource() -> None:
    store = ObjectStore()
    made = store.create("nodepartitionings", {**_np(), "status": {"observedGeneration": 9}})
    assert "status" not in made  # a create does not set status
    with_status = store.update(
        "nodepartitionings", {**made, "status": {"observedGeneration": 1}}, status=True
    )
    assert with_status["status"] == {"observedGeneration": 1}
    assert with_status["metadata"]["generation"] == 1  # status writes leave the generation
    spec_write = store.update(
        "nodepartitionings",
        {**with_status, "status": {"observedGeneration": 5}, "spec": {"gpus": [], "paused": True}},
    )
    assert spec_write["status"] == {"observedGeneration": 1} and spec_write["spec"]["paused"]
    bad = {**spec_write, "spec": {"gpus": []}}
    status_write = store.update(
        "nodepartitionings", {**bad, "status": {"observedGeneration": 2}}, status=True
    )
    assert status_write["spec"]["paused"]  # a status write leaves the spec


def test_watch_returns_what_changed_after_a_version_and_waits_for_it() -> None:
    store = ObjectStore()
    first = store.create("nodepartitionings", _np("a"))
    since = int(first["metadata"]["resourceVersion"])
    store.put("nodes", {"metadata": {"name": "n"}})
    assert store.watch("nodepartitionings", since, 0) == []
    threading.Timer(0.05, lambda: store.create("nodepartitionings", _np("b"))).start()
    events = store.watch("nodepartitionings", since, 5)
    assert [(k, o["metadata"]["name"]) for k, o in events] == [("ADDED", "b")]


def test_local_cluster_logs_claims_and_slices_for_watchers_and_expires_old_versions() -> None:
    cluster = LocalCluster()
    cluster.put_resource_claim({"metadata": {"name": "c", "namespace": "ns"}, "spec": {}})
    items, rv = cluster.list_objects("resourceclaims")
    assert [i["metadata"]["name"] for i in items] == ["c"]
    cluster.delete_resource_claim("ns", "c")
    assert [k for k, _ in cluster.watch_objects("resourceclaims", rv, 0)] == ["DELETED"]
    cluster.objects.keep_events = 1
    for i in range(3):
        cluster.objects.put("nodes", {"metadata": {"name": f"n{i}"}})
    with pytest.raises(Expired):
        list(cluster.watch_objects("nodes", rv, 0))


def test_file_cluster_objects_follow_the_same_rules_and_watch_by_polling(tmp_path) -> None:
    from driver.plugin.filecluster import FileCluster

    cluster = FileCluster(tmp_path)
    made = cluster.create_object("nodepartitionings", {**_np("n1"), "status": {"observedGeneration": 3}})
    assert "status" not in made and made["metadata"]["generation"] == 1
    items, rv = cluster.list_objects("nodepartitionings", "metadata.name=n1")
    assert [i["metadata"]["name"] for i in items] == ["n1"]
    with_status = cluster.update_object(
        "nodepartitionings", {**made, "status": {"observedGeneration": 1}}, status=True
    )
    with pytest.raises(Conflict):
        cluster.update_object("nodepartitionings", made, status=True)
    assert [k for k, _ in cluster.watch_objects("nodepartitionings", rv, 0)] == ["MODIFIED"]
    cluster.delete_object("nodepartitionings", "n1")
    kinds = [
        k
        for k, _ in cluster.watch_objects("nodepartitionings", with_status["metadata"]["resourceVersion"], 0)
    ]
    assert kinds == ["DELETED"]
    assert list(cluster.watch_objects("nodepartitionings", "999", 0)) == []
