"""The chart's ClusterRole grants exactly the API calls the plugin makes: the plugin process runs its
publish and prepare paths against the HTTP stand-in of the API server, every request it sends is turned
into the (apiGroup, resource, verb) RBAC would check, and that set must equal the ClusterRole's rules.
The slice writes it sent must also pass the chart's admission policy for its own node."""

from __future__ import annotations

import time

from support.admission import AdmissionRequest, evaluators
from support.apiserver_standin import ApiServerStandIn, Recorded
from support.cgroups import pod_uid, write_cgroup
from support.helm_render import NAMESPACE, RELEASE, SCENARIOS, render, rules_of
from support.plugin_harness import NODE, PluginProcess, result
from support.rbac import PUBLIC_PATHS, rbac_of

from driver import names
from driver.cluster.kube import KubeCluster, load_api_client
from driver.devices.slices import slice_name
from driver.plugin.enforcement.crosscheck import ClaimView, GpuProcess
from driver.plugin.enforcement.enforcer import Enforcer


def test_rbac_of_maps_requests_like_the_api_server():
    assert rbac_of(Recorded("GET", "/apis/resource.k8s.io/v1/resourceslices/x", {})) == (
        "resource.k8s.io",
        "resourceslices",
        "get",
    )
    assert (
        rbac_of(Recorded("GET", "/apis/resource.k8s.io/v1/resourceslices", {"watch": ["true"]}))[2] == "watch"
    )
    assert rbac_of(Recorded("PUT", "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c/status", {})) == (
        "resource.k8s.io",
        "resourceclaims/status",
        "update",
    )
    assert rbac_of(Recorded("GET", "/api/v1/nodes/n", {})) == ("", "nodes", "get")
    assert rbac_of(Recorded("GET", "/version", {})) == "/version"
    # the namespaces collection is a resource like any other (the controller lists and watches it)
    assert rbac_of(Recorded("GET", "/api/v1/namespaces", {})) == ("", "namespaces", "list")
    assert rbac_of(Recorded("GET", "/api/v1/namespaces/ns", {})) == ("", "namespaces", "get")


def _old_slice(k: int) -> dict:
    """A slice of this node's pool as an earlier plugin might have left it: the plugin rewrites slice 0
    (update) and removes slice 99, which it no longer publishes (delete)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(NODE, k)},
        "spec": {
            "driver": names.DRIVER_NAME,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 2},
            "devices": [{"name": f"gone-{k}"}],
        },
    }


def test_cluster_role_grants_exactly_the_calls_the_plugin_makes(node, kubelet, tmp_path):
    with ApiServerStandIn() as server:
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        seed = KubeCluster(load_api_client(kubeconfig))
        seeded = {slice_name(NODE, k): _old_slice(k) for k in (0, 99)}
        for obj in seeded.values():
            seed.create_resource_slice(obj)
        # The node's NodePartitioning (the strategy controller's): read, watched, its status written.
        server.put_object(
            "nodepartitionings",
            {
                "apiVersion": "carve.dev/v1alpha1",
                "kind": "NodePartitioning",
                "metadata": {"name": NODE},
                "spec": {"gpus": [{"index": 1, "strategy": "soft"}]},
            },
        )
        server.requests.clear()
        extra = ("--cluster", "kube", "--kubeconfig", str(kubeconfig), "--k8s-version", "1.34")
        plugin = PluginProcess(node, "1=soft,exclusive", extra=extra).start()
        try:
            plugin.wait_for_log(r"event=publish\.done")
            wait_status = server.objects.get("nodepartitionings", "", NODE)
            for _ in range(100):
                if wait_status.get("status"):
                    break
                time.sleep(0.1)
                wait_status = server.objects.get("nodepartitionings", "", NODE)
            assert wait_status.get("status"), "the plugin wrote no NodePartitioning status"
            # The informer lists, then opens its watch from its own thread: wait for that request too.
            for _ in range(100):
                if ("carve.dev", "nodepartitionings", "watch") in {rbac_of(r) for r in server.requests}:
                    break
                time.sleep(0.1)
            stored = server.put_claim(
                {
                    "metadata": {"name": "c", "namespace": "ml"},
                    "spec": {"devices": {"requests": [{"name": "g"}]}},
                    "status": {"allocation": {"devices": {"results": [result("g", "gpu-0")]}}},
                }
            )
            claim = ("ml", "c", stored["metadata"]["uid"])
            assert kubelet.prepare([claim])[claim[2]]["error"] == ""
            # status.devices: sent from the plugin's report thread (claims/status.py), so waited for
            deadline = time.monotonic() + 10
            while not server.objects.get("resourceclaims", "ml", "c")["status"].get("devices"):
                assert time.monotonic() < deadline, "the plugin wrote no status.devices"
                time.sleep(0.05)
            assert kubelet.unprepare([claim]) == {claim[2]: ""}
            # Admin access: the namespace's label is read at prepare.
            server.put_object(
                "namespaces",
                {"metadata": {"name": "debug", "labels": {"resource.kubernetes.io/admin-access": "true"}}},
            )
            admin_result = {**result("g", "gpu-0"), "adminAccess": True}
            stored = server.put_claim(
                {
                    "metadata": {"name": "peek", "namespace": "debug"},
                    "spec": {"devices": {"requests": [{"name": "g"}]}},
                    "status": {"allocation": {"devices": {"results": [admin_result]}}},
                }
            )
            admin = ("debug", "peek", stored["metadata"]["uid"])
            assert kubelet.prepare([admin])[admin[2]]["error"] == ""
            assert kubelet.unprepare([admin]) == {admin[2]: ""}
        finally:
            plugin.stop()
        # The region watcher's NVML cross-check: a claim over its quota by NVML's count, seen on two passes
        # in a row, is reported as an Event on the claim through the plugin's own cluster client.
        view = ClaimView(claim[2], "ml", "c", ("GPU-1",), (1 << 30,), pods=frozenset({pod_uid(1)}))
        write_cgroup(tmp_path, 4242, pod_uid(1))  # the claim's pod's process, by its cgroup
        stray = {"GPU-1": [GpuProcess(pid=4242, used_bytes=4 << 30)]}
        enforcer = Enforcer(NODE, seed, False, processes=lambda _gpus: stray, proc_root=tmp_path)
        for _ in range(2):
            enforcer.check([view], {claim[2]: ("ml", "c")})
        recorded = [rbac_of(r) for r in server.requests]
        slice_writes = [r for r in server.requests if "/resourceslices" in r.path and r.method != "GET"]
        event_writes = [r for r in server.requests if r.path.endswith("/events") and r.method == "POST"]

    used = {r for r in recorded if isinstance(r, tuple)}
    assert {r for r in recorded if isinstance(r, str)} <= PUBLIC_PATHS
    # The scenario reached every path of the plugin that talks to the API server.
    assert {v for g, r, v in used if r == "resourceslices"} == {"list", "create", "update", "delete"}
    assert ("resource.k8s.io", "resourceclaims", "get") in used
    assert ("", "events", "create") in used
    assert ("carve.dev", "nodepartitionings/status", "update") in used
    assert {v for g, r, v in used if r == "nodepartitionings"} == {"get", "list", "watch"}
    assert ("resource.k8s.io", "resourceclaims/status", "update") in used
    assert ("", "namespaces", "get") in used
    for scenario in SCENARIOS.values():
        objects = render(*scenario)
        # resourceclaims/driver is the API server's own check on a status write (granular status
        # authorization), never a request of its own.
        synthetic = {("resource.k8s.io", "resourceclaims/driver", "associated-node:update")}
        claims_role = rules_of(objects, of="claims")
        assert synthetic <= claims_role
        granted = rules_of(objects) | (claims_role - synthetic)
        assert granted - used == set(), "the ClusterRole grants calls the plugin never makes"
        assert used - granted == set(), "the plugin makes calls the ClusterRole does not grant"

    # The same writes, as this node's plugin sends them, pass the chart's admission policy for slices.
    policy = evaluators(render())[f"{RELEASE}-resourceslices"]
    user = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-kubelet-plugin"
    operations = {"POST": "CREATE", "PUT": "UPDATE", "DELETE": "DELETE"}
    for r in slice_writes:
        name = r.path.rsplit("/", 1)[-1]
        request = AdmissionRequest(
            operations[r.method],
            "resource.k8s.io",
            "v1",
            "resourceslices",
            user,
            {"authentication.kubernetes.io/node-name": [NODE]},
            object=r.body if r.method != "DELETE" else None,
            old_object=seeded.get(name) if r.method != "POST" else None,
        )
        decision = policy.admit(request)
        assert decision.matched and decision.allowed and not decision.errors, (r.method, r.path, decision)
    assert {r.method for r in slice_writes} == {"POST", "PUT", "DELETE"}

    # Its Events pass the chart's policy for them (about a ResourceClaim, from its node, carve's reasons);
    # the same Event about another object, as another node, or with another reason does not.
    events = evaluators(render())[f"{RELEASE}-plugin-events"]
    node_extra = {"authentication.kubernetes.io/node-name": [NODE]}

    def event_decision(body: dict, extra=node_extra):
        namespace = body["metadata"]["namespace"]
        request = AdmissionRequest(
            "CREATE", "", "v1", "events", user, extra, object=body, namespace=namespace
        )
        return events.admit(request)

    assert event_writes
    for r in event_writes:
        decision = event_decision(r.body)
        assert decision.matched and decision.allowed and not decision.errors, (r.path, decision)
    body = event_writes[0].body
    forged = [
        {**body, "involvedObject": {**body["involvedObject"], "kind": "Pod", "apiVersion": "v1"}},
        {**body, "involvedObject": {**body["involvedObject"], "namespace": "kube-system"}},
        {**body, "reason": "Killing"},
        {**body, "source": {**body["source"], "host": "node-b"}},
    ]
    for f in forged:
        decision = event_decision(f)
        assert decision.matched and not decision.allowed, f
    assert not event_decision(body, {"authentication.kubernetes.io/node-name": ["node-b"]}).allowed
