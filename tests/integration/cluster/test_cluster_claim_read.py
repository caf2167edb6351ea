"""KubeCluster.get_resource_claim reads the server's JSON as sent (no client model in between): every field
the server has comes back, timestamps as the server wrote them, and a claim nested past decode.MAX_DEPTH is
still a ClusterError naming the claim."""

from __future__ import annotations

import pytest
from support.apiserver_standin import ApiServerStandIn
from test_cluster_contract import claim_obj

from driver.cluster import ClusterError
from driver.cluster.decode import MAX_DEPTH
from driver.cluster.kube import KubeCluster


def test_fields_the_client_model_does_not_know_come_back(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
):
    obj = claim_obj("c1", "team-a")
    # A field of a newer API (no model in this client has it) and another driver's opaque status data.
    obj["spec"]["devices"]["requests"][0]["exactly"]["futureSelector"] = {"kind": "x", "weight": 3}
    obj["status"] = {
        "devices": [
            {"driver": "net.example.com", "pool": "p", "device": "nic-0", "data": {"a": [1, {"b": None}]}}
        ]
    }
    stored = apiserver.put_claim(obj)
    got = kube_cluster.get_resource_claim("team-a", "c1")
    assert got["spec"]["devices"]["requests"][0]["exactly"]["futureSelector"] == {"kind": "x", "weight": 3}
    assert got["status"]["devices"][0]["data"] == {"a": [1, {"b": None}]}
    assert got["metadata"]["creationTimestamp"] == stored["metadata"]["creationTimestamp"]
    assert got["metadata"]["uid"] == obj["metadata"]["uid"]


def test_a_claim_nested_past_the_limit_is_an_error_naming_it(
    apiserver: ApiServerStandIn, kube_cluster: KubeCluster
):
    obj = claim_obj("deep", "team-a")
    nested: dict = {}
    inner = nested
    for _ in range(MAX_DEPTH + 5):
        inner["x"] = {}
        inner = inner["x"]
    obj["spec"]["devices"]["config"][0]["opaque"]["parameters"]["deep"] = nested
    apiserver.put_claim(obj)
    with pytest.raises(ClusterError, match="team-a/deep") as raised:
        kube_cluster.get_resource_claim("team-a", "deep")
    assert (raised.value.kind, raised.value.name, raised.value.namespace) == (
        "ResourceClaim",
        "deep",
        "team-a",
    )
