"""templates/claims-rbac.yaml: the plugin's claims role (status, the per-driver permission, namespaces)
and the admission policy that keeps a node's plugin to the status.devices of claims allocated on that node."""

from __future__ import annotations

import copy

import pytest
from helm_render import FAKE_VALUES, NAMESPACE, one, render, rules_of
from support.admission import AdmissionRequest, PolicyEvaluator, evaluators

from driver import names

PLUGIN_SA = f"system:serviceaccount:{NAMESPACE}:carve-kubelet-plugin"
NODE_KEY = "authentication.kubernetes.io/node-name"


@pytest.fixture(scope="module")
def policy() -> PolicyEvaluator:
    return evaluators(render("-f", str(FAKE_VALUES), kube_version="1.36.0"))["carve-claim-status"]


def claim(node: str = "node-a", devices: list | None = None) -> dict:
    status = {
        "allocation": {
            "devices": {
                "results": [{"request": "g", "driver": names.DRIVER_NAME, "pool": node, "device": "gpu-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
    }
    if devices is not None:
        status["devices"] = devices
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "status": status,
    }


def entry(driver: str = names.DRIVER_NAME, device: str = "gpu-0") -> dict:
    return {"driver": driver, "pool": "node-a", "device": device, "conditions": []}


def write(new: dict, old: dict, node: str | None = "node-a", user: str = PLUGIN_SA) -> AdmissionRequest:
    return AdmissionRequest(
        "UPDATE",
        "resource.k8s.io",
        "v1",
        "resourceclaims/status",
        user,
        {NODE_KEY: [node]} if node else {},
        object=new,
        old_object=old,
        sub_resource="status",
    )


def test_the_plugin_writes_its_entries_on_its_own_node(policy):
    d = policy.admit(write(claim(devices=[entry()]), claim()))
    assert d.matched and d.allowed and not d.errors


def test_another_nodes_claim_is_refused(policy):
    d = policy.admit(write(claim("node-b", devices=[entry()]), claim("node-b")))
    assert not d.allowed and any("allocated on that node" in m for m in d.denials)


def test_a_token_without_node_is_refused(policy):
    assert not policy.admit(write(claim(devices=[entry()]), claim(), node=None)).allowed


def test_allocation_and_reservations_stay_untouched(policy):
    changed = claim(devices=[entry()])
    changed["status"]["reservedFor"] = []
    d = policy.admit(write(changed, claim()))
    assert any("only change status.devices" in m for m in d.denials)


def test_other_drivers_entries_are_not_ours(policy):
    old = claim(devices=[entry("net.example.com", "nic-0")])
    new = copy.deepcopy(old)
    new["status"]["devices"] = [entry()]  # drops the other driver's entry
    d = policy.admit(write(new, old))
    assert any("only write status.devices entries of driver" in m for m in d.denials)
    kept = claim(devices=[entry("net.example.com", "nic-0"), entry()])
    assert policy.admit(write(kept, old)).allowed


def test_other_users_are_not_matched(policy):
    assert not policy.admit(write(claim("node-b"), claim("node-b"), user="system:kube-scheduler")).matched


def test_claims_role_grants_status_the_driver_permission_and_namespaces_only():
    objects = render()
    assert rules_of(objects, of="claims") == {
        ("resource.k8s.io", "resourceclaims/status", "update"),
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:update"),
        ("", "namespaces", "get"),
    }
    role = one(objects, "ClusterRole", "claims")
    (driver_rule,) = [r for r in role["rules"] if r["resources"] == ["resourceclaims/driver"]]
    assert driver_rule["resourceNames"] == [names.DRIVER_NAME]


def test_claim_status_off_drops_the_role_and_the_policy():
    objects = render("--set", "plugin.claimStatus=false")
    assert not [
        o for o in objects if "claims" in o["metadata"]["name"] and "kubelet-plugin" in o["metadata"]["name"]
    ]
    assert not [o for o in objects if o["metadata"]["name"] == "carve-claim-status"]
