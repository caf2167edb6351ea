"""The chart's controller roles grant exactly the API calls `carve controller` makes: its informers, a
NodePartitioning created and one updated, Events, and the leader Lease (created, read, renewed), all through
the real kubernetes client against the API stand-in; every recorded request is turned into the (apiGroup,
resource, verb) RBAC checks and the set must equal the chart's ClusterRole and Role for the controller
(tests/unit/helm/test_helm_controller.py reads the same calls from the code; this records them)."""

from __future__ import annotations

import threading
import time

from support.apiserver_standin import ApiServerStandIn
from support.helm_render import NAMESPACE, render
from support.partitioning import claim, mig, node_slices
from support.rbac import PUBLIC_PATHS, rbac_of

from driver.cluster.kube import KubeCluster
from driver.cluster.leader import LeaderElector, ObjectLeases
from driver.controller.reconcile import Reconciler, ReconcilerConfig
from driver.simulate.cluster import device_classes


def granted(objects) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for o in objects
        if o["kind"] in ("ClusterRole", "Role")
        and o["metadata"]["labels"].get("app.kubernetes.io/component") == "controller"
        for rule in o["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _wait(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_the_controller_roles_grant_exactly_the_calls_it_makes(tmp_path):
    with ApiServerStandIn() as server:
        seed = KubeCluster.from_config(server.kubeconfig(tmp_path / "seed", token="seed"))
        for node in ("node-a", "node-b"):
            for s in node_slices(node, "2xA100-80GB", "soft"):
                seed.create_resource_slice(s)
            server.put_object("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
        for dc in device_classes():
            server.put_object("deviceclasses", dc)
        server.put_object("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
        # node-b already has a NodePartitioning (the controller updates it); node-a has none (it creates one)
        server.put_object(
            "nodepartitionings",
            {
                "apiVersion": "carve.dev/v1alpha1",
                "kind": "NodePartitioning",
                "metadata": {"name": "node-b"},
                "spec": {"gpus": [{"index": 0, "strategy": "soft"}, {"index": 1, "strategy": "soft"}]},
            },
        )
        for i in range(4):
            server.put_claim(claim(mig("7g.80gb"), name=f"wants-mig-{i}"))
        api = KubeCluster.from_config(server.kubeconfig(tmp_path / "controller", token="controller"))
        stop = threading.Event()
        try:
            r = Reconciler(api, ReconcilerConfig(grace_s=0, interval_s=60))
            assert r.start_informers(stop, timeout_s=10)
            assert r.reconcile_once().changes
            elector = LeaderElector(ObjectLeases(api), NAMESPACE, "carve-controller", "me")
            assert elector.try_acquire() and elector.try_acquire()  # create, then read and renew
            assert _wait(lambda: {"create", "update"} <= verbs(server, "nodepartitionings"))
        finally:
            stop.set()
    calls = {rbac_of(x) for x in server.requests if x.token == "controller"}
    assert {c for c in calls if isinstance(c, str)} <= PUBLIC_PATHS
    used = {c for c in calls if isinstance(c, tuple)}
    assert ("", "events", "create") in used and ("coordination.k8s.io", "leases", "update") in used
    grants = granted(render())
    assert grants - used == set(), "the chart grants the controller calls it never makes"
    assert used - grants == set(), "the controller makes calls the chart does not grant"


def verbs(server: ApiServerStandIn, resource: str) -> set[str]:
    return {
        c[2]
        for c in (rbac_of(x) for x in server.requests if x.token == "controller")
        if isinstance(c, tuple) and c[1] == resource
    }
