"""The optional mutating webhook: schedulerName, the GPU count the kubelet needs, privileged containers
refused; and its AdmissionReview edge over HTTP."""

from __future__ import annotations

import base64
import copy
import http.client
import json

import pytest
from support.legacy_node import gpu_pod

from driver import names
from driver.legacy.request import Defaults, pod_request
from driver.legacy.webhook import WebhookServer, admission_response, review

GPU, MEM = names.LEGACY_GPU, names.LEGACY_GPUMEM


def apply(pod: dict, patch: tuple[dict, ...]) -> dict:
    """A minimal JSONPatch `add` (the only op the webhook emits)."""
    out = copy.deepcopy(pod)
    for op in patch:
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        target[last] = op["value"]
    return out


def plain(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    pod["spec"].pop("schedulerName", None)
    return pod


def test_sets_scheduler_and_adds_the_gpu_count_for_memory_only_containers():
    pod = plain(gpu_pod("p", [("main", {MEM: 3000}), ("side", {"cpu": "1"})]))
    pod["spec"]["containers"][1]["resources"] = {}
    d = review(pod)
    assert d.allowed
    out = apply(pod, d.patch)
    assert out["spec"]["schedulerName"] == names.LEGACY_SCHEDULER_NAME
    assert out["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"
    assert GPU not in out["spec"]["containers"][1]["resources"].get("limits", {})
    (c,) = pod_request(out).containers
    assert (c.count, c.memory_mib) == (1, 3000)


def test_container_without_resources_gets_them_created():
    pod = plain(gpu_pod("p", [("main", {})]))
    pod["spec"]["containers"][0] = {"name": "main", "resources": {"requests": {names.LEGACY_GPUCORES: "20"}}}
    out = apply(pod, review(pod, default_gpu_num=2).patch)
    assert out["spec"]["containers"][0]["resources"]["limits"] == {GPU: "2"}


def test_other_schedulers_and_pods_without_gpus_are_left_alone():
    pod = plain(gpu_pod("p", [("main", {GPU: 1})]))
    pod["spec"]["schedulerName"] = "volcano"
    assert review(pod).patch == ()
    assert review(plain(gpu_pod("q", [("main", {"cpu": 1})]))).patch == ()


def test_privileged_gpu_container_is_denied():
    pod = plain(gpu_pod("p", [("init-x", {GPU: 1})]))
    pod["spec"]["initContainers"][0]["securityContext"] = {"privileged": True}
    d = review(pod)
    assert not d.allowed and "init-x is privileged" in d.message


def test_priority_the_admin_does_not_allow_is_denied_at_creation():
    pod = plain(gpu_pod("p", [("main", {GPU: 1, names.LEGACY_PRIORITY: 0})]))
    low = Defaults(priority="low")
    d = review(pod, defaults=low)
    assert not d.allowed
    assert "nvidia.com/priority: 0 (high) is not allowed in namespace 'team'" in d.message, d.message
    assert review(pod, defaults=Defaults(priority="low", high_priority_namespaces=("team",))).allowed
    assert review(pod).allowed  # HAMi's default (high) bounds nothing
    # The namespace of a CREATE comes from the request when the object does not carry it yet.
    del pod["metadata"]["namespace"]
    body = {"kind": "AdmissionReview", "request": {"uid": "u", "namespace": "vip", "object": pod}}
    vip = Defaults(priority="low", high_priority_namespaces=("vip",))
    assert admission_response(body, names.LEGACY_SCHEDULER_NAME, 1, vip)["response"]["allowed"] is True
    assert admission_response(body, names.LEGACY_SCHEDULER_NAME, 1, low)["response"]["allowed"] is False


@pytest.fixture
def server():
    s = WebhookServer("127.0.0.1:0", names.LEGACY_SCHEDULER_NAME, 1)
    s.start()
    yield s
    s.stop()


def post(server, body: bytes):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def test_admission_review_round_trip(server):
    pod = plain(gpu_pod("p", [("main", {MEM: 100})]))
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "object": pod},
    }
    status, got = post(server, json.dumps(body).encode())
    assert status == 200
    r = got["response"]
    assert r["uid"] == "u1" and r["allowed"] and r["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(r["patch"]))
    assert apply(pod, tuple(patch))["spec"]["schedulerName"] == names.LEGACY_SCHEDULER_NAME


def test_denial_carries_the_reason(server):
    pod = plain(gpu_pod("p", [("main", {GPU: 1})]))
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    body = {"kind": "AdmissionReview", "request": {"uid": "u2", "object": pod}}
    status, got = post(server, json.dumps(body).encode())
    assert status == 200 and got["response"]["allowed"] is False
    assert "privileged" in got["response"]["status"]["message"]


@pytest.mark.parametrize("raw", [b"{nope", b"[]", b'{"kind": "Pod"}'])
def test_malformed_review_is_400(server, raw):
    status, got = post(server, raw)
    assert status == 400 and got["error"]
