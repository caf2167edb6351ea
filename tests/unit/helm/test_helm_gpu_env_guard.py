"""The NVIDIA container toolkit guard (issue 29): a pod using ResourceClaims may not ask the toolkit for GPUs
its own way (env NVIDIA_VISIBLE_DEVICES, a mount under /var/run/nvidia-container-devices), evaluated with
the policy's own CEL (tests/support/admission.py)."""

from __future__ import annotations

import pytest
from helm_render import FAKE_VALUES, render
from support.admission import AdmissionRequest, evaluators

POLICY = "carve-gpu-env"


@pytest.fixture(scope="module")
def guard():
    return evaluators(render("-f", str(FAKE_VALUES)))[POLICY]


def pod(containers: list[dict], claims: bool = True, init: list[dict] | None = None) -> dict:
    spec: dict = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "soft-4gi"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


def create(obj: dict, resource: str = "pods") -> AdmissionRequest:
    return AdmissionRequest("CREATE", "", "v1", resource, "alice", object=obj, name="p", namespace="ml")


def env(value: str | None = None, value_from: dict | None = None) -> list[dict]:
    e: dict = {"name": "NVIDIA_VISIBLE_DEVICES"}
    if value is not None:
        e["value"] = value
    if value_from:
        e["valueFrom"] = value_from
    return [e]


@pytest.mark.parametrize(
    "container",
    [
        {"name": "sidecar", "image": "cuda", "env": env("all")},
        {"name": "sidecar", "image": "cuda", "env": env("0,1")},
        {"name": "sidecar", "image": "cuda", "env": env(value_from={"configMapKeyRef": {"name": "x"}})},
        {"name": "sidecar", "image": "cuda",
         "volumeMounts": [{"name": "null", "mountPath": "/var/run/nvidia-container-devices/all"}]},
        {"name": "sidecar", "image": "cuda",
         "volumeMounts": [{"name": "null", "mountPath": "/var/run//nvidia-container-devices/0"}]},
    ],
)
def test_a_claim_pod_asking_the_toolkit_for_gpus_is_refused(guard, container):
    main = {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
    decision = guard.admit(create(pod([main, container])))
    assert decision.matched and not decision.allowed and not decision.errors
    assert "container sidecar" in " ".join(decision.denials)


def test_init_containers_are_checked_too(guard):
    main = {"name": "main", "image": "cuda"}
    decision = guard.admit(create(pod([main], init=[{"name": "warmup", "image": "cuda", "env": env("all")}])))
    assert not decision.allowed and "container warmup" in " ".join(decision.denials)


@pytest.mark.parametrize("value", ["void", "none"])
def test_void_and_none_are_allowed(guard, value):
    decision = guard.admit(create(pod([{"name": "main", "image": "cuda", "env": env(value)}])))
    assert decision.allowed and not decision.errors


def test_a_plain_claim_pod_is_allowed(guard):
    main = {"name": "main", "image": "cuda", "env": [{"name": "OTHER", "value": "all"}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    decision = guard.admit(create(pod([main])))
    assert decision.allowed and not decision.errors


def test_pods_without_claims_are_not_the_policys_business(guard):
    decision = guard.admit(create(pod([{"name": "main", "image": "cuda", "env": env("all")}], claims=False)))
    assert not decision.matched and decision.allowed


def test_ephemeral_containers_are_checked(guard):
    obj = pod([{"name": "main", "image": "cuda"}])
    obj["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "cuda", "env": env("all")}]
    req = AdmissionRequest(
        "UPDATE", "", "v1", "pods/ephemeralcontainers", "alice", object=obj, old_object=obj,
        sub_resource="ephemeralcontainers", name="p", namespace="ml",
    )
    decision = guard.admit(req)
    assert not decision.allowed and "container debug" in " ".join(decision.denials)


def test_the_guard_can_be_turned_off():
    objects = render("-f", str(FAKE_VALUES), "--set", "validatingAdmissionPolicy.toolkitGuard=false")
    assert POLICY not in evaluators(objects)
