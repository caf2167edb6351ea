"""The chart's objects and the plugin's ResourceSlices against the real API server's validation and
admission; the plugin's credentials against the chart's RBAC and ValidatingAdmissionPolicy."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client

from driver import names
from driver.cluster.kube import load_api_client
from e2e.cluster.chart import NAMESPACE, render_chart

CLASSES = {names.CLASS_GPU, names.CLASS_VGPU, "slot.carve.dev", "mig.carve.dev", "timeslice.carve.dev"}


def _types(slices: list[dict]) -> set[str]:
    return {d["attributes"]["type"]["string"] for s in slices for d in s["spec"].get("devices") or []}


def test_chart_objects_are_served(cluster, api):
    """kubectl applied `helm template` at start; a server-side dry run applies them again (validation,
    CEL compilation and admission of every object), and each kind is there."""
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=render_chart(cluster.version))
    assert out.returncode == 0, out.stderr
    custom = client.CustomObjectsApi(api)
    served = {
        c["metadata"]["name"]
        for c in custom.list_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses")["items"]
    }
    assert served >= CLASSES
    rbac = client.RbacAuthorizationV1Api(api)
    assert rbac.read_cluster_role("carve-kubelet-plugin").rules
    assert rbac.read_cluster_role_binding("carve-kubelet-plugin").subjects[0].namespace == NAMESPACE
    adm = client.AdmissionregistrationV1Api(api)
    policies = [p.metadata.name for p in adm.list_validating_admission_policy().items]
    bindings = [b.spec.policy_name for b in adm.list_validating_admission_policy_binding().items]
    assert policies and set(policies) <= set(bindings)
    ds = client.AppsV1Api(api).read_namespaced_daemon_set("carve-kubelet-plugin", NAMESPACE)
    assert ds.status.desired_number_scheduled == len(cluster.nodes)


def test_a_broken_chart_object_is_refused(cluster):
    """The dry run above means something: the same server refuses a DeviceClass whose CEL does not compile."""
    chart = render_chart(cluster.version)
    bad = chart.replace('expression: "device.driver ==', 'expression: "device.driver === (', 1)
    assert bad != chart
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=bad, check=False)
    assert out.returncode != 0 and "compil" in out.stderr.lower(), out.stderr


def test_every_strategy_publishes_accepted_slices(cluster, gates_on):
    n1, n2 = (_types(cluster.slices(n)) for n in cluster.nodes)
    if gates_on:
        # n1: 0=mig (MIG instances and the whole GPU), soft; n2: exclusive, timeslice, slots.
        assert {"mig", "vgpu"} <= n1, n1
        assert {"gpu", "timeslice", "slot"} <= n2, n2
        devices = [d for s in cluster.slices() for d in s["spec"].get("devices") or []]
        # What the API server drops with its gates off came back: the fields were validated and stored.
        assert any(d.get("allowMultipleAllocations") for d in devices), "no consumable-capacity device"
        assert any(d.get("consumesCounters") for d in devices), "no partitionable (counter) device"
        assert any(s["spec"].get("sharedCounters") for s in cluster.slices()), "no shared counters"
    else:
        # The plugin's fallback: mig -> exclusive, soft -> slots, timeslice -> exclusive.
        assert n1 == {"gpu", "slot"}, n1
        assert n2 == {"gpu", "slot"}, n2


def test_pool_has_one_generation(cluster):
    for node in cluster.nodes:
        slices = cluster.slices(node)
        assert len({s["spec"]["pool"]["generation"] for s in slices}) == 1
        assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}


def _slice(node: str, name: str, driver: str = names.DRIVER_NAME, pool: str = "") -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "d0"}],
        },
    }


@pytest.fixture
def plugin_a(cluster):
    """The credentials node e2e-n1's plugin runs with."""
    node = next(iter(cluster.nodes.values()))
    return client.CustomObjectsApi(load_api_client(node.plugin_kubeconfig)), load_api_client(
        node.plugin_kubeconfig
    )


def _refused(call) -> client.ApiException:
    with pytest.raises(client.ApiException) as e:
        call()
    assert e.value.status in (403, 422), e.value
    return e.value


def test_plugin_credentials_are_limited_to_their_node(cluster, api, plugin_a):
    custom_a, api_a = plugin_a
    a, b = list(cluster.nodes)
    admin = client.CustomObjectsApi(api)
    g, v, r = "resource.k8s.io", "v1", "resourceslices"
    # Its own node: create, update, delete (the node's plugin is stopped meanwhile: it would remove a
    # slice of its driver and node that it did not publish).
    node_a = cluster.nodes[a]
    node_a.plugin.stop()
    try:
        own = custom_a.create_cluster_custom_object(g, v, r, _slice(a, f"authz-{a}"))
        own["spec"]["devices"].append({"name": "d1"})
        custom_a.replace_cluster_custom_object(g, v, r, own["metadata"]["name"], own)
        custom_a.delete_cluster_custom_object(g, v, r, own["metadata"]["name"])
    finally:
        node_a.restart_plugin(kill=False)
    # Another driver's slice, even on its own node: refused by the policy.
    for other in (
        _slice(a, f"authz-other-{a}", driver="authz.e2e.carve.dev"),
        _slice(a, f"authz-pool-{a}", pool=f"{a}-other"),
    ):
        e = _refused(lambda o=other: custom_a.create_cluster_custom_object(g, v, r, o))
        assert "ValidatingAdmissionPolicy" in e.body, e.body
    # Node B's: refused by the chart's admission policy, naming both nodes.
    e = _refused(lambda: custom_a.create_cluster_custom_object(g, v, r, _slice(b, f"authz-{b}")))
    assert "ValidatingAdmissionPolicy" in e.body and a in e.body and b in e.body, e.body
    theirs = cluster.slices(b)[0]
    changed = copy.deepcopy(theirs)
    changed["spec"]["devices"] = changed["spec"]["devices"][:1]
    _refused(lambda: custom_a.replace_cluster_custom_object(g, v, r, theirs["metadata"]["name"], changed))
    _refused(lambda: custom_a.delete_cluster_custom_object(g, v, r, theirs["metadata"]["name"]))
    assert admin.get_cluster_custom_object(g, v, r, theirs["metadata"]["name"])["spec"] == theirs["spec"]
    # Anything the chart does not grant: RBAC's 403.
    core_a = client.CoreV1Api(api_a)
    assert _refused(lambda: core_a.list_namespaced_pod(NAMESPACE)).status == 403
    assert _refused(lambda: core_a.read_namespaced_secret("x", NAMESPACE)).status == 403
    klass = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "authz-e2e"},
        "spec": {},
    }
    assert _refused(lambda: custom_a.create_cluster_custom_object(g, v, "deviceclasses", klass)).status == 403


def test_a_token_without_a_node_is_refused_by_the_policy(cluster, api):
    """A token of the same ServiceAccount not bound to a pod carries no node: the policy refuses it."""
    core = client.CoreV1Api(api)
    token = core.create_namespaced_service_account_token(
        "carve-kubelet-plugin", NAMESPACE, {"spec": {"expirationSeconds": 600}}
    ).status.token
    from e2e.cluster import kubeconfig

    node = next(iter(cluster.nodes.values()))
    kc = kubeconfig.write(
        node.root / "unbound.kubeconfig", cluster.cp.server, cluster.cp.ca.path, token=token
    )
    custom = client.CustomObjectsApi(load_api_client(kc))
    e = _refused(
        lambda: custom.create_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", _slice(node.name, "authz-unbound")
        )
    )
    assert "ValidatingAdmissionPolicy" in e.body, e.body
