"""The chart's ValidatingAdmissionPolicies on the real API server, against cel-python's evaluation of the same
rendered policies (tests/support/admission.py, which the unit tests in tests/unit/helm use): what the API
server refuses, it refuses with the message cel-python computes, and what cel-python allows, it accepts.

- ResourceSlices (admissionpolicy.yaml): a node's plugin credentials write only slices of its own node, its
  own pool and carve's driver;
- claim configs (claimpolicy.yaml): a ResourceClaim (or template) may not override what its DeviceClass does
  not allow; the policy's params are the DeviceClasses, so a class created here is one more param;
- NodePartitioning status (partitioning-admission.yaml): a node's plugin writes only its own object's status.
"""

from __future__ import annotations

import dataclasses
import uuid

import pytest
import yaml
from kubernetes import client

from driver import names
from driver.cluster.kube import load_api_client
from e2e import kube
from e2e.cluster.chart import NAMESPACE, SERVICE_ACCOUNT, render_chart
from tests.support.admission import AdmissionRequest, PolicyEvaluator, evaluators

G, V = "resource.k8s.io", "v1"
NODE_KEY = "authentication.kubernetes.io/node-name"
PLUGIN_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"


@pytest.fixture(scope="module")
def policies(cluster) -> dict[str, PolicyEvaluator]:
    """The policies exactly as the launcher applied them, for cel-python."""
    objects = [o for o in yaml.safe_load_all(render_chart(cluster.version)) if o]
    return evaluators(objects)


@pytest.fixture(scope="module")
def node_a(cluster):
    """Node e2e-n1's name and a client with the credentials its plugin runs with (a pod-bound token)."""
    node = next(iter(cluster.nodes.values()))
    return node.name, load_api_client(node.plugin_kubeconfig)


def _denied(call) -> client.ApiException:
    with pytest.raises(client.ApiException) as e:
        call()
    return e.value


def _assert_policy_denied(e: client.ApiException, policy: str, message: str) -> None:
    """The API server's refusal is the policy's, with cel-python's message for the same request."""
    assert e.status in (403, 422), e
    assert f"ValidatingAdmissionPolicy '{policy}'" in e.body, e.body
    # The body is JSON: quotes inside the message are escaped there; compare on the decoded message.
    assert message in yaml.safe_load(e.body)["message"], (message, e.body)


def test_policies_type_check_clean(api):
    """The API server type-checks each policy against its match and param kinds: no expression of carve's
    policies draws a warning (a warning is where cel-python and the API server could disagree)."""
    adm = client.AdmissionregistrationV1Api(api)

    def checked():
        mine = [
            p for p in adm.list_validating_admission_policy().items if p.metadata.name.startswith("carve-")
        ]
        done = all(p.status and p.status.observed_generation == p.metadata.generation for p in mine)
        return mine if done else None

    policies = kube.wait("the API server's type check of carve's policies", checked, timeout_s=60)
    assert {"carve-resourceslices", "carve-claim-configs", "carve-claim-policy"} <= {
        p.metadata.name for p in policies
    }
    for p in policies:
        warnings = (p.status.type_checking or client.V1TypeChecking()).expression_warnings
        assert not warnings, (p.metadata.name, warnings)


# --- ResourceSlices ---------------------------------------------------------------------------------------


def _slice(name: str, node: str, pool: str, driver: str = names.DRIVER_NAME) -> dict:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool, "generation": 99, "resourceSliceCount": 1},
            "devices": [{"name": "d0"}],
        },
    }


@pytest.mark.parametrize("field", ["nodeName", "pool.name", "driver"])
def test_node_credentials_cannot_write_another_nodes_slice(cluster, node_a, policies, field):
    """Each field on its own: another node's nodeName (its pool too), another node's pool under its own
    nodeName (the review's finding: a higher generation there makes that node's devices vanish), another
    driver on its own node and pool."""
    a, api_a = node_a
    b = next(n for n in cluster.nodes if n != a)
    name = f"adm-{field.replace('.', '-').lower()}-{uuid.uuid4().hex[:5]}"
    obj = {
        "nodeName": _slice(name, b, b),
        "pool.name": _slice(name, a, b),
        "driver": _slice(name, a, a, driver="adm.e2e.carve.dev"),
    }[field]
    request = AdmissionRequest(
        "CREATE", G, V, "resourceslices", PLUGIN_USER, {NODE_KEY: [a]}, object=obj, name=name
    )
    expected = policies["carve-resourceslices"].admit(request)
    assert expected.matched and not expected.errors and expected.denials, expected
    custom_a = client.CustomObjectsApi(api_a)
    e = _denied(lambda: custom_a.create_cluster_custom_object(G, V, "resourceslices", obj))
    _assert_policy_denied(e, "carve-resourceslices", expected.denials[0])
    admin = client.CustomObjectsApi(cluster.api())
    assert not [
        s
        for s in admin.list_cluster_custom_object(G, V, "resourceslices")["items"]
        if s["metadata"]["name"] == name
    ]


# --- claim configs against their DeviceClass ----------------------------------------------------------------


def _slice_config(**fields) -> dict:
    return {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", **fields}


def _claim(name: str, class_name: str, parameters: dict, template: bool = False) -> dict:
    spec = {
        "devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": class_name}}],
            "config": [{"opaque": {"driver": names.DRIVER_NAME, "parameters": parameters}}],
        }
    }
    if template:
        return {
            "apiVersion": f"{G}/{V}",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": spec},
        }
    return {"apiVersion": f"{G}/{V}", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}


def _classes(api) -> list[dict]:
    items = client.CustomObjectsApi(api).list_cluster_custom_object(G, V, "deviceclasses")["items"]
    # list items carry no apiVersion/kind; the evaluator matches params on them
    return [{"apiVersion": f"{G}/{V}", "kind": "DeviceClass", **c} for c in items]


def _expected_denials(policies, api, obj: dict, namespace: str) -> list[str]:
    resource = "resourceclaimtemplates" if obj["kind"] == "ResourceClaimTemplate" else "resourceclaims"
    request = AdmissionRequest(
        "CREATE", G, V, resource, "admin", object=obj, name=obj["metadata"]["name"], namespace=namespace
    )
    out = []
    for policy in ("carve-claim-configs", "carve-claim-policy"):
        decision = policies[policy].admit(request, _classes(api))
        assert not decision.errors, (policy, decision.errors)
        out += [(policy, d) for d in decision.denials]
    return out


@pytest.fixture
def batch_class(api):
    """A DeviceClass whose soft slices run at low priority (claims may not raise it)."""
    name = f"adm-batch-{uuid.uuid4().hex[:5]}.carve.dev"
    custom = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(
        G,
        V,
        "deviceclasses",
        {
            "apiVersion": f"{G}/{V}",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{names.DRIVER_NAME}"'}}],
                "config": [
                    {
                        "opaque": {
                            "driver": names.DRIVER_NAME,
                            "parameters": _slice_config(priority="low"),
                        }
                    }
                ],
            },
        },
    )
    yield name
    custom.delete_cluster_custom_object(G, V, "deviceclasses", name)


@pytest.mark.parametrize(
    ("case", "template"),
    [("core-disable", False), ("core-disable", True), ("claim-policy", False), ("priority-high", False)],
)
def test_claim_overriding_what_its_class_forbids_is_refused(
    api, namespace, policies, batch_class, case, template
):
    class_name, parameters = {
        # the chart's soft-slice class keeps throttling on: a claim may only tighten it
        "core-disable": (names.CLASS_VGPU, _slice_config(corePolicy="disable")),
        # only a DeviceClass may say what its claims may change
        "claim-policy": (names.CLASS_VGPU, _slice_config(claimPolicy={"corePolicy": ["disable"]})),
        # the class says low; a claim may not raise it
        "priority-high": (batch_class, _slice_config(priority="high")),
    }[case]
    obj = _claim(f"adm-{case}", class_name, parameters, template=template)
    expected = _expected_denials(policies, api, obj, namespace)
    assert len(expected) == 1, expected
    policy, message = expected[0]

    # A new DeviceClass reaches the policy through the API server's param informer: a claim created
    # before it is seen is let through (parameterNotFoundAction/Allow for that class), so retry a while.
    def refused():
        try:
            kube.create(api, namespace, obj)
        except client.ApiException as e:
            return e
        _delete(api, namespace, obj)
        return None

    e = kube.wait(f"{obj['kind']} {case} refused", refused, timeout_s=30, every_s=1)
    _assert_policy_denied(e, policy, message)


def _delete(api, namespace: str, obj: dict) -> None:
    plural = "resourceclaimtemplates" if obj["kind"] == "ResourceClaimTemplate" else "resourceclaims"
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        G, V, namespace, plural, obj["metadata"]["name"]
    )


def test_claim_tightening_its_class_is_accepted(api, namespace, policies, batch_class):
    """What the classes allow goes through: tighter core policy and lower priority on the chart's class,
    the class's own priority on the low-priority class, and the same as a template."""
    for obj in (
        _claim("adm-tighter", names.CLASS_VGPU, _slice_config(corePolicy="force", priority="low")),
        _claim("adm-tighter-t", names.CLASS_VGPU, _slice_config(corePolicy="force"), template=True),
        _claim("adm-batch-low", batch_class, _slice_config(priority="low", oomPolicy="kill")),
    ):
        assert _expected_denials(policies, api, obj, namespace) == []
        created = kube.create(api, namespace, obj)
        assert created["metadata"]["uid"], created


# --- NodePartitioning status ----------------------------------------------------------------------------


NP = ("carve.dev", "v1alpha1", "nodepartitionings")


def test_node_credentials_write_only_their_own_nodepartitioning_status(cluster, api, node_a, policies):
    a, api_a = node_a
    admin = client.CustomObjectsApi(api)
    custom_a = client.CustomObjectsApi(api_a)
    created_own = False
    ghost = f"adm-ghost-{uuid.uuid4().hex[:5]}"  # a node with no plugin: nothing acts on its object
    admin.create_cluster_custom_object(
        *NP,
        {
            "apiVersion": "carve.dev/v1alpha1",
            "kind": "NodePartitioning",
            "metadata": {"name": ghost},
            "spec": {"paused": True},
        },
    )
    try:
        obj = admin.get_cluster_custom_object(*NP, ghost)
        obj["status"] = {"observedGeneration": obj["metadata"]["generation"], "gpus": []}
        request = AdmissionRequest(
            "UPDATE",
            "carve.dev",
            "v1alpha1",
            "nodepartitionings/status",
            PLUGIN_USER,
            {NODE_KEY: [a]},
            object=obj,
            old_object=obj,
            sub_resource="status",
            name=ghost,
        )
        expected = policies["carve-nodepartitioning-status"].admit(request)
        assert expected.matched and not expected.errors and expected.denials, expected
        e = _denied(lambda: custom_a.replace_cluster_custom_object_status(*NP, ghost, obj))
        _assert_policy_denied(e, "carve-nodepartitioning-status", expected.denials[0])
        assert a in expected.denials[0] and ghost in expected.denials[0]
        # What the policy allows: the status of its own node's object (cel-python agrees first). The
        # object asks for nothing (paused, no GPUs named), so node a's plugin keeps its strategies.
        mine = {"apiVersion": "carve.dev/v1alpha1", "kind": "NodePartitioning", "metadata": {"name": a}}
        admin.create_cluster_custom_object(*NP, {**mine, "spec": {"paused": True}})
        created_own = True
        own = dataclasses.replace(request, name=a, object={**obj, "metadata": {"name": a}})
        assert policies["carve-nodepartitioning-status"].admit(own).allowed

        def written():
            current = admin.get_cluster_custom_object(*NP, a)
            current["status"] = {**(current.get("status") or {}), "observedGeneration": 1}
            try:
                return custom_a.replace_cluster_custom_object_status(*NP, a, current)
            except client.ApiException as e:
                if e.status != 409:  # the plugin wrote its status in between: read again
                    raise
                return None

        assert kube.wait(f"node {a}'s NodePartitioning status written with its credentials", written, 30)
    finally:
        admin.delete_cluster_custom_object(*NP, ghost)
        if created_own:
            admin.delete_cluster_custom_object(*NP, a)
