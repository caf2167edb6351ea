"""The file-backed cluster's objects (`--cluster file:<dir>`, driver/plugin/filecluster.py) as an informer
sees them: a watch from a resourceVersion yields only what changed after it, in order, deletions included
(from their tombstones, with a version newer than the object's last); a name selector narrows it; a watch
with nothing newer ends at its timeout; and a missing object of each kind is a 404 naming it."""

from __future__ import annotations

import pytest

from driver.cluster.base import AlreadyExists, NotFound
from driver.plugin.filecluster import FileCluster

PLURAL = "nodepartitionings"


def _np(name: str, **spec) -> dict:
    return {"metadata": {"name": name}, "spec": spec}


def _watch(cluster, rv: str, selector: str = "", timeout_s: int = 0) -> list[tuple[str, str, str]]:
    return [
        (kind, o["metadata"]["name"], o["metadata"]["resourceVersion"])
        for kind, o in cluster.watch_objects(PLURAL, rv, timeout_s, selector)
    ]


def test_a_watch_yields_what_changed_after_its_version_deletions_included(tmp_path):
    cluster = FileCluster(tmp_path)
    a = cluster.create_object(PLURAL, _np("a"))
    _, rv = cluster.list_objects(PLURAL)
    assert rv == a["metadata"]["resourceVersion"]
    b = cluster.create_object(PLURAL, _np("b"))
    cluster.delete_object(PLURAL, "a")
    gone_rv = str(int(b["metadata"]["resourceVersion"]) + 1)  # the deletion takes the next version
    assert _watch(cluster, rv) == [
        ("MODIFIED", "b", b["metadata"]["resourceVersion"]),
        ("DELETED", "a", gone_rv),
    ]
    # from the deletion's version on, nothing
    assert _watch(cluster, gone_rv) == []
    # from the start, both objects once: b as it is, a as deleted
    assert _watch(cluster, "0") == [
        ("MODIFIED", "b", b["metadata"]["resourceVersion"]),
        ("DELETED", "a", gone_rv),
    ]
    objects, now = cluster.list_objects(PLURAL)
    assert [o["metadata"]["name"] for o in objects] == ["b"] and now == gone_rv
    with pytest.raises(NotFound) as e:
        cluster.get_object(PLURAL, "a")
    assert e.value.status == 404
    cluster.delete_object(PLURAL, "b")  # a second deletion beside the first tombstone
    assert [k for k, _ in cluster.watch_objects(PLURAL, gone_rv, 0)] == ["DELETED"]
    assert cluster.list_objects(PLURAL)[0] == []


def test_a_deleted_objects_tombstone_keeps_its_last_contents(tmp_path):
    cluster = FileCluster(tmp_path)
    cluster.create_object(PLURAL, _np("a", gpus=[{"index": 0}]))
    cluster.delete_object(PLURAL, "a")
    ((kind, obj),) = list(cluster.watch_objects(PLURAL, "0", 0))
    assert kind == "DELETED" and obj["spec"] == {"gpus": [{"index": 0}]} and obj["metadata"]["name"] == "a"


def test_a_name_selector_narrows_the_watch_and_the_list(tmp_path):
    cluster = FileCluster(tmp_path)
    cluster.create_object(PLURAL, _np("a"))
    b = cluster.create_object(PLURAL, _np("b"))
    assert _watch(cluster, "0", "metadata.name=b") == [("MODIFIED", "b", b["metadata"]["resourceVersion"])]
    objects, _ = cluster.list_objects(PLURAL, "metadata.name=a")
    assert [o["metadata"]["name"] for o in objects] == ["a"]


def test_a_watch_with_nothing_newer_waits_for_its_timeout_then_ends(tmp_path):
    cluster = FileCluster(tmp_path)
    a = cluster.create_object(PLURAL, _np("a"))
    assert _watch(cluster, a["metadata"]["resourceVersion"], timeout_s=1) == []


def test_creating_an_object_twice_is_a_409_and_deleting_a_missing_one_a_404(tmp_path):
    cluster = FileCluster(tmp_path)
    cluster.create_object(PLURAL, _np("a"))
    with pytest.raises(AlreadyExists) as e:
        cluster.create_object(PLURAL, _np("a"))
    assert e.value.status == 409
    with pytest.raises(NotFound):
        cluster.delete_object(PLURAL, "b")


def test_a_missing_claim_or_slice_is_a_404_naming_it(tmp_path):
    cluster = FileCluster(tmp_path)
    for call, what in (
        (lambda: cluster.get_resource_claim("ns", "c"), "resourceclaims ns/c not found"),
        (lambda: cluster.delete_resource_claim("ns", "c"), "resourceclaims ns/c not found"),
        (lambda: cluster.get_resource_slice("s"), "resourceslices 's' not found"),
        (lambda: cluster.delete_resource_slice("s"), "resourceslices 's' not found"),
    ):
        with pytest.raises(NotFound, match=what) as e:
            call()
        assert e.value.status == 404
    claim = cluster.put_resource_claim({"metadata": {"name": "c", "namespace": "ns"}})
    cluster.delete_resource_claim("ns", "c")
    with pytest.raises(NotFound):
        cluster.get_resource_claim("ns", claim["metadata"]["name"])
