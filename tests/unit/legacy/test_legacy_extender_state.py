"""The extender's state comes from the API (restart = resync), finished pods' records are collected by the
leader only, and unreadable records are skipped. (The Lease elector that picks the leader is tested in
tests/unit/cluster/test_cluster_leader.py, through this API too.)"""

from __future__ import annotations

from support.legacy_node import NAMESPACE, gpu_pod, inventory_node

from driver import names
from driver.cluster.base import ClusterError
from driver.cluster.leader import LeaderElector
from driver.legacy.extender.command import collect_round
from driver.legacy.extender.state import ExtenderState
from driver.legacy.extender.verbs import Extender
from driver.legacy.kubeapi import MemoryLegacyApi

GPU, MEM = names.LEGACY_GPU, names.LEGACY_GPUMEM


def cluster():
    api = MemoryLegacyApi()
    api.add_node(inventory_node("n0", gpus=1, memory_mib=10000, split=10))
    state = ExtenderState(api, NAMESPACE)
    state.resync()
    return api, Extender(state)


def bind(api, ext, name: str, mem: int, node: str = "n0") -> dict:
    api.add_pod(gpu_pod(name, [("main", {GPU: 1, MEM: mem})]))
    return ext.bind({"PodName": name, "PodNamespace": "team", "PodUID": f"uid-{name}", "Node": node})


def test_a_restarted_extender_sees_the_earlier_assignments():
    api, ext = cluster()
    assert bind(api, ext, "a", 6000) == {"Error": ""}
    fresh = Extender(ExtenderState(api, NAMESPACE))
    fresh.state.resync()
    pod = gpu_pod("b", [("main", {GPU: 1, MEM: 6000})])
    got = fresh.filter({"Pod": pod, "NodeNames": ["n0"]})
    assert got["NodeNames"] == [] and "4000 MiB free < 6000" in got["FailedNodes"]["n0"]


def test_pod_annotations_never_count_as_usage():
    api, ext = cluster()
    forged = gpu_pod("x", [("main", {GPU: 1, MEM: 100})])
    forged["metadata"]["annotations"][names.LEGACY_ASSIGNMENT_ANNOTATION] = '{"main": ["GPU-n0-0:10000:100"]}'
    forged["spec"]["nodeName"] = "n0"
    api.add_pod(forged)
    ext.state.resync()
    assert bind(api, ext, "a", 9000) == {"Error": ""}


def test_only_the_leader_collects_records_of_finished_pods():
    api, ext = cluster()
    bind(api, ext, "a", 1000)
    bind(api, ext, "b", 1000)
    api.pods[("team", "a")]["status"]["phase"] = "Succeeded"
    api.delete_pod("team", "b")
    ext.state.resync(collect=False)
    assert ext.state.view("n0").usage == {}  # not counted any more
    assert len(api.configmaps) == 2  # but a follower deletes nothing
    ext.state.resync(collect=True)
    assert not api.configmaps


def test_only_the_replica_holding_the_lease_collects():
    api, ext = cluster()
    bind(api, ext, "a", 1000)
    api.pods[("team", "a")]["status"]["phase"] = "Succeeded"
    leader, follower = (LeaderElector(api, NAMESPACE, "lease", who) for who in ("leader", "follower"))
    assert leader.try_acquire()
    assert collect_round(ext.state, follower) == 0 and len(api.configmaps) == 1
    readable = api.get_lease

    def unreachable(namespace: str, name: str) -> dict:
        raise ClusterError("Lease: API server unreachable", "Lease", name, namespace)

    api.get_lease = unreachable  # the leader cannot renew: it deletes nothing this round
    assert collect_round(ext.state, leader) == 0 and len(api.configmaps) == 1
    api.get_lease = readable
    assert collect_round(ext.state, leader) == 1 and not api.configmaps
    assert collect_round(ext.state, None) == 0  # without --leader-elect every round collects (none left)


def test_record_of_a_pod_being_bound_is_kept():
    api, ext = cluster()
    bind(api, ext, "a", 1000)
    api.pods[("team", "a")]["spec"]["nodeName"] = ""  # the Binding not visible yet
    ext.state.resync(collect=True)
    assert len(api.configmaps) == 1


def test_unreadable_record_is_skipped():
    api, ext = cluster()
    bind(api, ext, "a", 1000)
    api.create_configmap(
        {
            "metadata": {
                "name": "carve-legacy-junk",
                "namespace": NAMESPACE,
                "labels": {names.LEGACY_RECORD_LABEL: "true", names.LEGACY_RECORD_NODE_LABEL: "n0"},
            },
            "data": {"assignment": "{not json"},
        }
    )
    ext.state.resync()
    assert set(ext.state.assignments) == {"uid-a"}


def test_bind_of_the_same_pod_again_replaces_its_record():
    api, ext = cluster()
    bind(api, ext, "a", 1000)
    api.pods[("team", "a")]["spec"]["nodeName"] = ""  # the scheduler retries after a lost Binding
    api.bindings.clear()
    assert ext.bind({"PodName": "a", "PodNamespace": "team", "PodUID": "uid-a", "Node": "n0"}) == {
        "Error": ""
    }
    assert len(api.configmaps) == 1 and api.bindings == [("team", "a", "uid-a", "n0")]


def test_a_binding_that_landed_despite_an_error_keeps_its_record():
    api, ext = cluster()
    api.add_pod(gpu_pod("a", [("main", {GPU: 1, MEM: 1000})]))
    real = api.create_binding

    def lost_answer(*args):
        real(*args)
        raise ClusterError("Binding team/a: API server unreachable: read timed out", "Binding", "a", "team")

    api.create_binding = lost_answer
    assert ext.bind({"PodName": "a", "PodNamespace": "team", "PodUID": "uid-a", "Node": "n0"}) == {
        "Error": ""
    }
    assert len(api.configmaps) == 1 and "uid-a" in ext.state.assignments


def test_repeated_bind_of_a_bound_pod_is_a_no_op():
    api, ext = cluster()
    bind(api, ext, "a", 1000)
    again = {"PodName": "a", "PodNamespace": "team", "PodUID": "uid-a"}
    assert ext.bind({**again, "Node": "n0"}) == {"Error": ""}
    assert "already bound to n0" in ext.bind({**again, "Node": "n1"})["Error"]
    assert len(api.configmaps) == 1 and len(api.bindings) == 1


def test_a_share_freed_before_the_watch_reports_it_is_found_at_filter():
    """The scheduler requeues a pending pod on the same delete event our pod watch has not applied yet:
    filter reads the refusing node's holders live instead of refusing from the stale view."""
    api, ext = cluster()
    bind(api, ext, "a", 6000)
    pending = gpu_pod("b", [("main", {GPU: 1, MEM: 6000})])
    assert ext.filter({"Pod": pending, "NodeNames": ["n0"]})["NodeNames"] == []
    api.delete_pod("team", "a")  # no pod_event: the watch is behind
    got = ext.filter({"Pod": pending, "NodeNames": ["n0"]})
    assert got["NodeNames"] == ["n0"] and got["FailedNodes"] == {}
    assert ext.state.view("n0").usage == {}


def test_live_holders_and_binds_in_flight_keep_their_share_at_filter():
    api, ext = cluster()
    bind(api, ext, "a", 3000)
    bind(api, ext, "b", 3000)
    api.pods[("team", "b")]["spec"]["nodeName"] = ""  # its Binding not visible yet
    pending = gpu_pod("c", [("main", {GPU: 1, MEM: 6000})])
    got = ext.filter({"Pod": pending, "NodeNames": ["n0"]})
    assert got["NodeNames"] == [] and "4000 MiB free < 6000" in got["FailedNodes"]["n0"]
    api.pods[("team", "a")]["status"]["phase"] = "Succeeded"  # a finished pod frees its share
    assert ext.filter({"Pod": pending, "NodeNames": ["n0"]})["NodeNames"] == ["n0"]
    assert set(ext.state.assignments) == {"uid-b"}


def test_a_node_too_small_for_the_pod_is_refused_without_reading_the_api():
    api, ext = cluster()
    bind(api, ext, "a", 1000)
    api.delete_pod("team", "a")

    def unexpected(node: str = "") -> list:
        raise AssertionError("listed pods for a node that could never fit the pod")

    api.list_pods = unexpected
    got = ext.filter({"Pod": gpu_pod("big", [("main", {GPU: 1, MEM: 20000})]), "NodeNames": ["n0"]})
    assert got["NodeNames"] == [] and "n0" in got["FailedNodes"]


def test_an_unreachable_api_at_filter_keeps_the_refusal():
    api, ext = cluster()
    bind(api, ext, "a", 6000)
    api.delete_pod("team", "a")

    def unreachable(node: str = "") -> list:
        raise ClusterError("Pod: API server unreachable", "Pod", "", "")

    api.list_pods = unreachable
    got = ext.filter({"Pod": gpu_pod("b", [("main", {GPU: 1, MEM: 6000})]), "NodeNames": ["n0"]})
    assert got["NodeNames"] == [] and "4000 MiB free < 6000" in got["FailedNodes"]["n0"]
