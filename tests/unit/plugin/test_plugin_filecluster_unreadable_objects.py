"""The file cluster's lists and watches when a file under it is not an object (a hand edit cut short, an
editor's leftovers): it is skipped, and the objects beside it are listed and watched as before; only `.json`
files are objects."""

from __future__ import annotations

from driver.plugin.filecluster import FileCluster

PLURAL = "nodepartitionings"


def test_a_file_that_is_not_an_object_is_skipped_by_lists_and_watches(tmp_path):
    cluster = FileCluster(tmp_path)
    cluster.create_object(PLURAL, {"metadata": {"name": "a"}, "spec": {}})
    (tmp_path / PLURAL / "broken.json").write_text('{"metadata": {"name": "bro')
    (tmp_path / PLURAL / "notes.txt").write_text("{}")
    cluster.create_object(PLURAL, {"metadata": {"name": "b"}, "spec": {}})
    items, _ = cluster.list_objects(PLURAL)
    assert [o["metadata"]["name"] for o in items] == ["a", "b"]
    assert [(k, o["metadata"]["name"]) for k, o in cluster.watch_objects(PLURAL, "0", 0)] == [
        ("MODIFIED", "a"),
        ("MODIFIED", "b"),
    ]
