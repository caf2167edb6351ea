"""The file-backed cluster (`carve plugin --cluster-dir`, driver/plugin/filecluster.py) keeps the API
server's optimistic concurrency for ResourceSlices: an update carrying another resourceVersion than the
stored one is a 409 Conflict, older or newer alike, and nothing is written (a survivor of generated
mutants: the check written as `>`)."""

from __future__ import annotations

import pytest

from driver.cluster.base import Conflict
from driver.plugin.filecluster import FileCluster


def _slice(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"driver": "gpu.carve.dev", "nodeName": "n1", "devices": []}}


def test_an_update_with_a_stale_or_unknown_resource_version_conflicts(tmp_path):
    cluster = FileCluster(tmp_path)
    first = cluster.create_resource_slice(_slice("s"))
    second = cluster.update_resource_slice({**first, "spec": {**first["spec"], "nodeName": "n2"}})
    current = second["metadata"]["resourceVersion"]
    assert int(current) > int(first["metadata"]["resourceVersion"])
    for rv in (first["metadata"]["resourceVersion"], str(int(current) + 5)):
        stale = {**first, "metadata": {**first["metadata"], "resourceVersion": rv}, "spec": {"nodeName": "x"}}
        with pytest.raises(Conflict, match=f"resourceVersion {rv} is stale") as e:
            cluster.update_resource_slice(stale)
        assert e.value.status == 409
    assert cluster.get_resource_slice("s")["spec"]["nodeName"] == "n2"  # nothing written
    # the current version, or none, updates
    third = cluster.update_resource_slice({**second, "spec": {**second["spec"], "nodeName": "n3"}})
    assert cluster.get_resource_slice("s")["spec"]["nodeName"] == "n3"
    blind = {**third, "metadata": {k: v for k, v in third["metadata"].items() if k != "resourceVersion"}}
    cluster.update_resource_slice({**blind, "spec": {**third["spec"], "nodeName": "n4"}})
    assert cluster.get_resource_slice("s")["spec"]["nodeName"] == "n4"
