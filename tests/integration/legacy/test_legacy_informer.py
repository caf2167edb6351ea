"""The extender's informers through the real `kubernetes` client against the API stand-in: the state
follows watch events without relisting, and a restarted extender rebuilds the same state (and refuses to
over-commit what its predecessor bound). The list+watch loop itself (410 Gone, backoff, a bad event) is
tested through both its callers in tests/integration/cluster/test_cluster_informer.py."""

from __future__ import annotations

import threading
import time

import pytest
from support.apiserver_standin import ApiServerStandIn
from support.legacy_node import NAMESPACE, gpu_pod, inventory_node

from driver import names
from driver.cluster.informer import Reflector
from driver.cluster.kube import load_api_client
from driver.legacy.extender.state import ExtenderState
from driver.legacy.extender.verbs import Extender
from driver.legacy.kubeapi import KubeLegacyApi, Source


def wait_for(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


@pytest.fixture
def cluster(tmp_path):
    s = ApiServerStandIn().start()
    s.max_watch_s = 1.0
    yield s, KubeLegacyApi(load_api_client(s.kubeconfig(tmp_path / "kubeconfig")))
    s.stop()


class Informers:
    """ExtenderState fed by the three reflectors of `carve scheduler-extender`."""

    def __init__(self, api: KubeLegacyApi) -> None:
        self.state = ExtenderState(api, NAMESPACE)
        st = self.state
        records = Source("configmaps", NAMESPACE, f"{names.LEGACY_RECORD_LABEL}=true")
        self.reflectors = {
            "nodes": Reflector(api, Source("nodes"), st.replace_nodes, st.node_event, 600, 1),
            "records": Reflector(api, records, st.replace_records, st.record_event, 600, 1),
            "pods": Reflector(api, Source("pods"), st.replace_pods, st.pod_event, 600, 1),
        }
        self.stop = threading.Event()
        self.threads = [r.start(self.stop) for r in self.reflectors.values()]
        for r in self.reflectors.values():
            assert r.synced.wait(10)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
            assert not t.is_alive()


def seed(s: ApiServerStandIn, node: str = "n0", gpus: int = 1, memory_mib: int = 10000) -> None:
    obj = inventory_node(node, gpus=gpus, memory_mib=memory_mib)
    obj.update(apiVersion="v1", kind="Node")
    s.put(f"/api/v1/nodes/{node}", obj)


def add_pod(s: ApiServerStandIn, name: str, mem: int) -> dict:
    pod = gpu_pod(name, [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: mem})])
    pod.update(apiVersion="v1", kind="Pod")
    s.put(f"/api/v1/namespaces/team/pods/{name}", pod)
    return pod


def bind(ext: Extender, pod: dict, node: str = "n0") -> str:
    meta = pod["metadata"]
    args = {"PodName": meta["name"], "PodNamespace": "team", "PodUID": meta["uid"], "Node": node}
    return ext.bind(args)["Error"]


def test_state_follows_watch_events_without_relisting(cluster):
    s, api = cluster
    inf = Informers(api)
    try:
        assert inf.state.nodes == {}
        seed(s, "n0", memory_mib=10000)
        wait_for(lambda: inf.state.nodes.get("n0") is not None)
        ext = Extender(inf.state)
        pod = add_pod(s, "p", 4000)
        assert bind(ext, pod) == ""
        wait_for(lambda: "uid-p" in inf.state.assignments)
        assert inf.state.view("n0").usage  # the record's usage counts
        # Another writer's record (e.g. the previous leader's) arrives by the watch alone.
        other = add_pod(s, "q", 3000)
        assert bind(Extender(ExtenderState(api, NAMESPACE)), other) == ""
        wait_for(lambda: "uid-q" in inf.state.assignments)
        # The pod finishes: its GPUs are free at once, before any collection deletes its record.
        done = s.objects["/api/v1/namespaces/team/pods/p"]
        done["status"]["phase"] = "Succeeded"
        s.put("/api/v1/namespaces/team/pods/p", done)
        wait_for(lambda: "uid-p" not in inf.state.assignments)
        s.delete("/api/v1/namespaces/team/pods/q")
        wait_for(lambda: "uid-q" not in inf.state.assignments)
        # The node's inventory changes: a bigger GPU shows without a relist.
        seed(s, "n0", memory_mib=20000)
        wait_for(lambda: inf.state.nodes["n0"].gpus[0].memoryMiB == 20000)
        s.delete("/api/v1/nodes/n0")
        wait_for(lambda: "n0" not in inf.state.nodes)
        assert {name: r.lists for name, r in inf.reflectors.items()} == {"nodes": 1, "records": 1, "pods": 1}
        watches = [r for r in s.requests if r[0] == "GET" and r[1] == "/api/v1/nodes"]
        assert len(watches) >= 2  # one list, then watches resumed from the last version
    finally:
        inf.close()


def test_a_restarted_extender_rebuilds_the_state_and_does_not_over_commit(cluster):
    s, api = cluster
    seed(s, "n0", memory_mib=10000)
    first = Informers(api)
    try:
        assert bind(Extender(first.state), add_pod(s, "big", 8000)) == ""
        wait_for(lambda: "uid-big" in first.state.assignments)
        before = first.state.view("n0").usage
    finally:
        first.close()
    second = Informers(api)  # a new process: nothing but the API
    try:
        assert set(second.state.assignments) == {"uid-big"}
        assert second.state.view("n0").usage == before
        late = add_pod(s, "late", 4000)
        got = Extender(second.state).filter({"Pod": late, "NodeNames": ["n0"]})
        assert got["NodeNames"] == [] and "n0" in got["FailedNodes"]
    finally:
        second.close()
