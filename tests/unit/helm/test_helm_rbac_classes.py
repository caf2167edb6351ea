"""The chart's RBAC is bound to the plugin (that it grants exactly the calls the plugin makes is checked by
tests/integration/plugin/test_plugin_rbac.py, which records them), its DeviceClasses are those of
deviceclasses/, and its admission policy confines the plugin's service account to its own node's slices."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helm_render import FAKE_VALUES, NAMESPACE, REPO, SCENARIOS, component, one, render, rules_of

from driver import names

CLASS_DIR = REPO / "deviceclasses"


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
    assert not [o for o in objects if o["kind"] == "ServiceAccount" and component(o) != "controller"]
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "gpu-plugin"
    vap = named(objects, "ValidatingAdmissionPolicy", "carve-resourceslices")
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
    objects = render(
        "--set", "deviceClasses.mig=false", "--set", "deviceClasses.timeslice=false",
        "--set", "deviceClasses.mps=false", "--set", "deviceClasses.vgpuStrict=false",
    )  # fmt: skip
    assert sorted(o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass") == [
        "gpu.carve.dev",
        "slot.carve.dev",
        "vgpu.carve.dev",
    ]
    assert not [o for o in render("--set", "deviceClasses.enabled=false") if o["kind"] == "DeviceClass"]


def named(objects, kind: str, name: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def test_admission_policy_covers_every_write_the_plugin_may_make():
    # What the policy's CEL allows and refuses: tests/unit/helm/test_helm_admission.py evaluates it.
    objects = render("-f", str(FAKE_VALUES))
    sa = one(objects, "ServiceAccount")["metadata"]["name"]
    vap = named(objects, "ValidatingAdmissionPolicy", "carve-resourceslices")
    binding = named(objects, "ValidatingAdmissionPolicyBinding", "carve-resourceslices")
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
    assert binding["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}


def test_claim_policies_take_every_device_class_as_parameter():
    objects = render()
    bounds = named(objects, "ValidatingAdmissionPolicy", "carve-claim-policy")
    assert bounds["spec"]["paramKind"] == {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass"}
    binding = named(objects, "ValidatingAdmissionPolicyBinding", "carve-claim-policy")
    assert binding["spec"]["paramRef"] == {"selector": {}, "parameterNotFoundAction": "Allow"}
    for name in ("carve-claim-configs", "carve-claim-policy"):
        (rule,) = named(objects, "ValidatingAdmissionPolicy", name)["spec"]["matchConstraints"][
            "resourceRules"
        ]
        assert set(rule["resources"]) == {"resourceclaims", "resourceclaimtemplates"}
        assert set(rule["apiVersions"]) == {"v1", "v1beta1", "v1beta2"}


def test_admission_policy_can_be_turned_off():
    objects = render("--set", "validatingAdmissionPolicy.enabled=false")
    assert not [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
