"""The legacy shim's RBAC grants exactly the calls it makes, and its node writes pass the chart's node policy.

The device plugin and the extender (informers, bind, the leader's record collection, the leader Lease) run
against the API stand-in, each with its own token; every request is turned into the (apiGroup,
resource, verb) RBAC checks, and each component's set must equal the rules the chart grants its service
account. The plugin's recorded node write is then evaluated, with cel-python, against the chart's
ValidatingAdmissionPolicy for nodes: allowed for its own node, refused for any other node or field."""

from __future__ import annotations

import copy
import threading
import time

import pytest
from support.admission import AdmissionRequest, evaluators
from support.apiserver_standin import ApiServerStandIn
from support.helm_render import NAMESPACE, RELEASE, render
from support.legacy_node import LegacyNode, gpu_pod
from support.rbac import rbac_of

from driver import names
from driver.cluster.informer import Reflector
from driver.cluster.kube import load_api_client
from driver.cluster.leader import LeaderElector
from driver.legacy.kubeapi import KubeLegacyApi, Source

NODE = "node-a"
ON = ("--set", "legacy.enabled=true")
PLUGIN_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-legacy-device-plugin"


class StandInApi(KubeLegacyApi):
    """The client against the stand-in, plus the test helpers LegacyNode uses (written straight into the
    stand-in, so they are not recorded as calls of the component)."""

    def __init__(self, standin: ApiServerStandIn, kubeconfig) -> None:
        super().__init__(load_api_client(kubeconfig))
        self.standin = standin

    def add_node(self, node: dict) -> None:
        obj = {"apiVersion": "v1", "kind": "Node", "spec": {}, "status": {}, **copy.deepcopy(node)}
        self.standin.put(f"/api/v1/nodes/{node['metadata']['name']}", obj)

    def add_pod(self, pod: dict) -> dict:
        meta = pod["metadata"]
        obj = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(pod)}
        return self.standin.put(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", obj)


def granted(objects: list[dict], suffixes: tuple[str, ...]) -> dict[tuple[str, str, str], set[str]]:
    """(group, resource, verb) -> where it is granted: '*' (ClusterRole) or the Role's namespace."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for o in objects:
        if o["kind"] not in ("ClusterRole", "Role") or not o["metadata"]["name"].endswith(suffixes):
            continue
        where = "*" if o["kind"] == "ClusterRole" else o["metadata"]["namespace"]
        for rule in o["rules"]:
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.setdefault((g, r, v), set()).add(where)
    return out


def used(requests, token: str) -> dict[tuple[str, str, str], set[str]]:
    """(group, resource, verb) -> namespaces it was called in ('*' for cluster-wide or cluster-scoped)."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for r in requests:
        if r.token != token:
            continue
        call = rbac_of(r)
        assert isinstance(call, tuple), f"non-resource request {call}"
        parts = r.path.split("/")
        ns = parts[parts.index("namespaces") + 1] if "namespaces" in parts else "*"
        out.setdefault(call, set()).add(ns)
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Run both components through every path that talks to the API server; yield the stand-in."""
    tmp = tmp_path_factory.mktemp("rbac")
    s = ApiServerStandIn().start()
    s.max_watch_s = 1.0
    plugin_api = StandInApi(s, s.kubeconfig(tmp / "plugin", token="plugin"))
    extender_api = StandInApi(s, s.kubeconfig(tmp / "extender", token="extender"))
    node = LegacyNode(NODE, api=plugin_api, extender_api=extender_api)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        # Extender: the informers of `carve scheduler-extender` (list, then watch).
        st = node.extender.state
        records = Source("configmaps", NAMESPACE, f"{names.LEGACY_RECORD_LABEL}=true")
        reflectors = [
            Reflector(extender_api, Source("nodes"), st.replace_nodes, st.node_event, 600, 1),
            Reflector(extender_api, records, st.replace_records, st.record_event, 600, 1),
            Reflector(extender_api, Source("pods"), st.replace_pods, st.pod_event, 600, 1),
        ]
        threads += [r.start(stop) for r in reflectors]
        node.start_plugin()  # plugin: publishes its inventory on its node
        pod = gpu_pod("p", [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 1000})])
        assert node.schedule(pod) == {"Error": ""}  # extender: bind (reads its node again, writes the record)
        node.admit(pod)
        node.kubelet.start_container("team", "p", "main")  # plugin: PreStartContainer reads pod and record
        gone = gpu_pod("gone", [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 1000})])
        assert node.schedule(gone) == {"Error": ""}
        s.delete("/api/v1/namespaces/team/pods/gone")
        assert node.extender.state.collect() == 1  # the leader deletes the record of a vanished pod
        elector = LeaderElector(extender_api, NAMESPACE, "carve-scheduler-extender", "me")
        assert elector.try_acquire() and elector.try_acquire()  # create, then renew
        time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        node.close()
        s.stop()
    return s


def assert_exact(calls: dict, grants: dict) -> None:
    """The same calls, and each where it is needed: a namespaced Role for calls in the release namespace
    only, a ClusterRole for calls in other namespaces or on cluster-scoped objects."""
    assert set(calls) == set(grants), (
        f"granted, never called: {sorted(set(grants) - set(calls))}; "
        f"called, not granted: {sorted(set(calls) - set(grants))}"
    )
    for call, where in grants.items():
        if "*" in where:
            assert calls[call] - {NAMESPACE}, f"{call} is only called in {NAMESPACE}: grant it by a Role"
        else:
            assert calls[call] <= where, f"{call} called in {calls[call]}, granted in {where}"


def test_device_plugin_role_is_exactly_its_calls(recorded):
    calls = used(recorded.requests, "plugin")
    assert_exact(calls, granted(render(*ON), ("-legacy-device-plugin",)))
    assert ("", "nodes", "patch") in calls and ("", "configmaps", "list") in calls
    # it reads no pod, of any namespace: PodResources and its node's records are enough
    assert not any(resource == "pods" for _g, resource, _v in calls)


def test_extender_roles_are_exactly_its_calls(recorded):
    calls = used(recorded.requests, "extender")
    # The scenario reached every path: informers, bind, collection, the Lease.
    verbs = {(r, v) for _g, r, v in calls}
    for want in [("nodes", "watch"), ("pods", "watch"), ("configmaps", "watch"), ("configmaps", "delete")]:
        assert want in verbs
    assert ("coordination.k8s.io", "leases", "update") in calls
    assert_exact(calls, granted(render(*ON), ("-legacy-extender", "-legacy-scheduler")))


def _policy():
    return evaluators(render(*ON))[f"{RELEASE}-legacy-nodes"]


def _node_write(recorded):
    (patch,) = [r for r in recorded.requests if r.token == "plugin" and r.method == "PATCH"]
    assert patch.path == f"/api/v1/nodes/{NODE}"
    old = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": {"gpu.carve.dev/legacy": "true"}, "annotations": {"a": "b"}},
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {},
    }
    new = copy.deepcopy(old)
    new["metadata"]["annotations"].update(patch.body["metadata"]["annotations"])
    return patch.body, old, new


def _admit(policy, old, new, node=NODE, op="UPDATE", resource="nodes", extra=True):
    req = AdmissionRequest(
        op,
        "",
        "v1",
        resource,
        PLUGIN_USER,
        {"authentication.kubernetes.io/node-name": [node]} if extra else {},
        object=new,
        old_object=old,
    )
    return policy.admit(req)


def test_the_plugins_recorded_node_write_passes_the_policy(recorded):
    body, old, new = _node_write(recorded)
    assert set(body["metadata"]["annotations"]) == {names.LEGACY_INVENTORY_ANNOTATION}
    decision = _admit(_policy(), old, new)
    assert decision.matched and decision.allowed and not decision.errors, decision


def test_policy_refuses_every_other_node_write(recorded):
    policy = _policy()
    _body, old, new = _node_write(recorded)

    def refused(decision) -> bool:
        return decision.matched and not decision.allowed and not decision.errors

    other_old = copy.deepcopy(old)
    other_old["metadata"]["name"] = "node-b"
    other_new = copy.deepcopy(new)
    other_new["metadata"]["name"] = "node-b"
    assert refused(_admit(policy, other_old, other_new))  # another node's inventory
    assert refused(_admit(policy, old, new, extra=False))  # a token without the node (legacy Secret token)
    labelled = copy.deepcopy(new)
    labelled["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    assert refused(_admit(policy, old, labelled))
    tainted = copy.deepcopy(new)
    tainted["spec"]["taints"] = [{"key": "x", "effect": "NoSchedule"}]
    assert refused(_admit(policy, old, tainted))
    for change in ({"a": "changed"}, {"other": "added"}):
        annotated = copy.deepcopy(new)
        annotated["metadata"]["annotations"].update(change)
        assert refused(_admit(policy, old, annotated))
    removed = copy.deepcopy(new)
    del removed["metadata"]["annotations"]["a"]
    assert refused(_admit(policy, old, removed))
    finalized = copy.deepcopy(new)
    finalized["metadata"]["finalizers"] = ["example.com/hold"]
    assert refused(_admit(policy, old, finalized))
    assert refused(_admit(policy, old, new, resource="nodes/status"))
    assert refused(_admit(policy, None, new, op="CREATE"))
    assert refused(_admit(policy, old, None, op="DELETE"))
    # Removing its own inventory annotation is allowed (it only touches its key); other users are not matched.
    bare = copy.deepcopy(old)
    assert _admit(policy, new, bare).allowed
    other_user = AdmissionRequest("UPDATE", "", "v1", "nodes", "system:node:node-b", {}, labelled, old)
    assert not policy.admit(other_user).matched


def test_policy_is_rendered_only_where_it_can_work():
    name = f"{RELEASE}-legacy-nodes"
    assert name not in evaluators(render())  # legacy off
    off = ("--set", "legacy.enabled=true,legacy.devicePlugin.admissionPolicy=false")
    assert name not in evaluators(render(*off))
    legacy_only = (
        "--set",
        "legacy.enabled=true,plugin.enabled=false,deviceClasses.enabled=false,"
        "validatingAdmissionPolicy.enabled=false",
    )
    assert name in evaluators(render(*legacy_only, kube_version="1.30.0"))
    assert name not in evaluators(render(*legacy_only, kube_version="1.29.0"))  # no admissionregistration v1
