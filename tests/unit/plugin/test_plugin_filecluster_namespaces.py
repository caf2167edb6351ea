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
