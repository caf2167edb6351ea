"""The chart's RBAC is exactly what the plugin's API calls need, its DeviceClasses are those of
deviceclasses/, and its admission policy confines the plugin's service account to its own node's slices."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from helm_render import FAKE_VALUES, NAMESPACE, REPO, SCENARIOS, one, render

from driver import names

KUBE_PY = REPO / "driver" / "cluster" / "kube.py"
CLASS_DIR = REPO / "deviceclasses"
# kubernetes client method prefix -> RBAC verb.
VERBS = {
    "read": "get",
    "list": "list",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete_collection": "deletecollection",
    "delete": "delete",
}
# Resource API classes the plugin may use; a new one (e.g. CoreV1Api for nodes) must be looked at here.
KNOWN_APIS = {"ResourceV1Api": "resource.k8s.io", "CoreV1Api": "", "VersionApi": None}
# kube.py's attribute holding each API object -> its API group.
API_ATTRS = {"resource": "resource.k8s.io", "core": ""}


def calls_of_kube_py() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) for every `self.resource.<method>(...)` call in driver/cluster/kube.py."""
    tree = ast.parse(KUBE_PY.read_text())
    apis = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "client"
        and node.func.attr.endswith("Api")
        and node.func.attr != "ApiClient"
    }
    assert apis <= set(KNOWN_APIS), f"kube.py uses API classes the chart's RBAC does not cover: {apis}"
    found = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func.value
        if not (isinstance(target, ast.Attribute) and target.attr in API_ATTRS):
            continue
        method = node.func.attr
        m = re.fullmatch(
            r"(read|list|create|replace|patch|delete_collection|delete)_(namespaced_)?(\w+?)", method
        )
        assert m, f"kube.py calls self.{target.attr}.{method}: unknown to this test"
        verb, kind = VERBS[m.group(1)], m.group(3)
        watch = any(k.arg == "watch" for k in node.keywords)
        # resource_slice -> resourceslices; resource_claim_status -> resourceclaims/status
        base, status = (kind.removesuffix("_status"), "/status") if kind.endswith("_status") else (kind, "")
        found.add((API_ATTRS[target.attr], base.replace("_", "") + "s" + status, "watch" if watch else verb))
    return found


def rules_of(objects) -> set[tuple[str, str, str]]:
    role = one(objects, "ClusterRole")
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_cluster_role_grants_exactly_the_calls_kube_py_makes():
    used = calls_of_kube_py()
    # Sanity: the scan sees the calls the plugin is known to make (dry-run creates are creates).
    assert ("resource.k8s.io", "resourceclaims", "get") in used
    assert ("resource.k8s.io", "resourceslices", "create") in used
    assert ("", "events", "create") in used  # the NVML cross-check's Events on claims
    for scenario in SCENARIOS.values():
        assert rules_of(render(*scenario)) == used


def test_cluster_role_is_bound_to_the_plugin_service_account():
    objects = render()
    binding = one(objects, "ClusterRoleBinding")
    sa = one(objects, "ServiceAccount")
    ds = one(objects, "DaemonSet")
    assert binding["roleRef"]["name"] == one(objects, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_existing_service_account_can_be_used_instead():
    objects = render("--set", "serviceAccount.create=false", "--set", "serviceAccount.name=gpu-plugin")
    assert not [o for o in objects if o["kind"] == "ServiceAccount"]
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "gpu-plugin"
    vap = one(objects, "ValidatingAdmissionPolicy")
    assert f"system:serviceaccount:{NAMESPACE}:gpu-plugin" in vap["spec"]["matchConditions"][0]["expression"]


def _essentials(obj: dict) -> dict:
    """What a DeviceClass means: the chart adds labels, the files carry comments; neither changes it."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "spec": obj["spec"],
    }


def _class_files(folder: Path) -> dict[str, dict]:
    out = {}
    for path in sorted(folder.glob("*.yaml")):
        obj = yaml.safe_load(path.read_text())
        out[obj["metadata"]["name"]] = _essentials(obj)
    return out


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rendered_device_classes_equal_the_repository_files(scenario):
    files = _class_files(CLASS_DIR)
    assert set(files) == set(names.DEVICE_CLASSES)
    rendered = {
        o["metadata"]["name"]: _essentials(o)
        for o in render(*SCENARIOS[scenario])
        if o["kind"] == "DeviceClass"
    }
    assert rendered == files


def test_extended_resource_variant_equals_its_repository_file():
    variants = _class_files(CLASS_DIR / "extended-resource")
    assert variants, "deviceclasses/extended-resource/ holds no class"
    for name, want in variants.items():
        objects = render(
            "--set", f"deviceClasses.extendedResourceName={want['spec']['extendedResourceName']}"
        )
        got = {o["metadata"]["name"]: _essentials(o) for o in objects if o["kind"] == "DeviceClass"}
        assert got[name] == want
        # Only that class changes.
        assert {k: v for k, v in got.items() if k != name} == {
            k: v for k, v in _class_files(CLASS_DIR).items() if k != name
        }


def test_device_classes_can_be_turned_off_one_by_one_or_all():
    objects = render("--set", "deviceClasses.mig=false", "--set", "deviceClasses.timeslice=false")
    assert sorted(o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass") == [
        "gpu.carve.dev",
        "slot.carve.dev",
        "vgpu.carve.dev",
    ]
    assert not [o for o in render("--set", "deviceClasses.enabled=false") if o["kind"] == "DeviceClass"]


def test_admission_policy_confines_the_plugin_service_account_to_its_node():
    objects = render("-f", str(FAKE_VALUES))
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    vap = one(objects, "ValidatingAdmissionPolicy")
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["resource.k8s.io"] and rule["resources"] == ["resourceslices"]
    assert set(rule["apiVersions"]) == {"v1", "v1beta1", "v1beta2"}
    # Every write verb the ClusterRole grants on slices is checked by the policy.
    writes = {
        v for g, r, v in rules_of(objects) if r == "resourceslices" and v in ("create", "update", "delete")
    }
    assert {op.lower() for op in rule["operations"]} == writes
    (cond,) = spec["matchConditions"]
    assert cond["expression"] == f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{sa}"'
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "authentication.kubernetes.io/node-name" in variables["userNodeName"]
    checks = " ".join(v["expression"] for v in spec["validations"])
    for name in ("userNodeName", "newNodeName", "oldNodeName"):
        assert f"variables.{name}" in checks
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}


def test_admission_policy_can_be_turned_off():
    objects = render("--set", "validatingAdmissionPolicy.enabled=false")
    assert not [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
