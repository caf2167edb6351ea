"""KubeLegacyApi through the real `kubernetes` client against a small HTTP stand-in of the API server: the
paths, verbs and content types on the wire (a merge patch must not go out as a JSON Patch), errors mapped to
NotFound / AlreadyExists / Conflict, and a whole bind through it."""

from __future__ import annotations

import pytest
from support.apiserver_standin import ApiServerStandIn
from support.legacy_node import NAMESPACE, gpu_pod, inventory_node

from driver import names
from driver.cluster.base import AlreadyExists, Conflict, NotFound
from driver.cluster.kube import load_api_client
from driver.legacy.extender.state import ExtenderState
from driver.legacy.extender.verbs import Extender
from driver.legacy.kubeapi import KubeLegacyApi
from driver.legacy.records import parse_record


@pytest.fixture
def standin(tmp_path):
    s = ApiServerStandIn().start()
    yield s, KubeLegacyApi(load_api_client(s.kubeconfig(tmp_path / "kubeconfig")))
    s.stop()


def test_a_bind_through_the_client(standin):
    s, api = standin
    node = inventory_node("n0", gpus=1, memory_mib=10000)
    node.update(apiVersion="v1", kind="Node")
    s.put("/api/v1/nodes/n0", node)
    pod = gpu_pod("p", [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 1000})])
    pod.update(apiVersion="v1", kind="Pod")
    s.put("/api/v1/namespaces/team/pods/p", pod)
    state = ExtenderState(api, NAMESPACE)
    state.resync()
    ext = Extender(state)
    assert ext.filter({"Pod": pod, "NodeNames": ["n0"]})["NodeNames"] == ["n0"]
    assert ext.bind({"PodName": "p", "PodNamespace": "team", "PodUID": "uid-p", "Node": "n0"}) == {
        "Error": ""
    }
    record = parse_record(api.get_configmap(NAMESPACE, "carve-legacy-uid-p"))
    assert record.containers[0].devices[0].memoryMiB == 1000
    assert s.objects["/api/v1/namespaces/team/pods/p"]["spec"]["nodeName"] == "n0"
    assert names.LEGACY_ASSIGNMENT_ANNOTATION in api.get_pod("team", "p")["metadata"]["annotations"]
    assert ("POST", "/api/v1/namespaces/team/pods/p/binding") in [r[:2] for r in s.requests]
    patches = [r for r in s.requests if r[0] == "PATCH"]
    assert patches and all(r.ctype == "application/merge-patch+json" for r in patches)


def test_errors_map_to_the_cluster_exceptions(standin):
    _s, api = standin
    with pytest.raises(NotFound):
        api.get_pod("team", "ghost")
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": NAMESPACE},
        "data": {},
    }
    api.create_configmap(cm)
    with pytest.raises(AlreadyExists):
        api.create_configmap(cm)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": NAMESPACE},
        "spec": {"holderIdentity": "a"},
    }
    created = api.create_lease(lease)
    created["metadata"]["resourceVersion"] = "stale"
    with pytest.raises(Conflict):
        api.update_lease(created)
    api.delete_configmap(NAMESPACE, "a")
    with pytest.raises(NotFound):
        api.delete_configmap(NAMESPACE, "a")
