"""The file cluster's Namespaces (demos and tests): the labels put are the labels read (the plugin reads a
claim namespace's admin-access label from them), and a namespace never put is NotFound."""

import pytest

from driver.cluster.base import NotFound
from driver.plugin.filecluster import FileCluster


def test_a_namespace_put_is_read_back_with_its_labels(tmp_path):
    cluster = FileCluster(tmp_path / "cluster")
    label = "resource.kubernetes.io/admin-access"
    cluster.put_namespace("debug", {label: "true"})
    assert cluster.get_namespace("debug")["metadata"] == {"name": "debug", "labels": {label: "true"}}
    cluster.put_namespace("debug", {label: "false"})  # put again: replaced
    assert cluster.get_namespace("debug")["metadata"]["labels"] == {label: "false"}
    with pytest.raises(NotFound):
        cluster.get_namespace("other")


def test_objects_of_one_kind_are_created_side_by_side_and_a_second_create_is_already_exists(tmp_path):
    # a second object of a kind goes into the directory the first one made (a survivor of generated
    # mutants in driver/plugin/filecluster.py: create_object's mkdir failing once the directory exists)
    from driver.cluster.base import AlreadyExists

    cluster = FileCluster(tmp_path / "cluster")
    for name in ("a", "b"):
        cluster.create_object("nodepartitionings", {"metadata": {"name": name}, "spec": {}})
    assert {cluster.get_object("nodepartitionings", n)["metadata"]["name"] for n in ("a", "b")} == {"a", "b"}
    with pytest.raises(AlreadyExists):
        cluster.create_object("nodepartitionings", {"metadata": {"name": "a"}, "spec": {}})
