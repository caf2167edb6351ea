"""The extender over HTTP: every route, the wire names, malformed and oversized input, and 100 parallel
filter+bind calls on 20 nodes that must never over-commit a GPU."""

from __future__ import annotations

import http.client
import json
import threading
from collections import defaultdict

import pytest
from support.legacy_node import NAMESPACE, gpu_pod, inventory_node

from driver import names
from driver.legacy.extender.http import MAX_BODY, ExtenderServer
from driver.legacy.extender.state import ExtenderState
from driver.legacy.extender.verbs import Extender
from driver.legacy.kubeapi import MemoryLegacyApi
from driver.legacy.records import parse_record
from driver.legacy.request import Defaults

GPU, MEM = names.LEGACY_GPU, names.LEGACY_GPUMEM


@pytest.fixture
def cluster():
    api = MemoryLegacyApi()
    for i in range(3):
        api.add_node(inventory_node(f"n{i}", gpus=2, memory_mib=10000, split=4))
    state = ExtenderState(api, NAMESPACE)
    state.resync()
    server = ExtenderServer(
        Extender(state), "127.0.0.1:0", ready=lambda: "" if state.synced else "not synced"
    )
    server.start()
    yield api, server
    server.stop()


def post(server, path: str, body, raw: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    try:
        return resp.status, json.loads(text)
    except json.JSONDecodeError:
        return resp.status, text


def get(server, path: str):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    return resp.status, resp.read().decode()


def test_healthz_and_readyz(cluster):
    _api, server = cluster
    assert get(server, "/healthz") == (200, "ok")
    assert get(server, "/readyz") == (200, "ok")
    assert get(server, "/nope")[0] == 404


def test_filter_returns_fitting_node_names_and_a_reason_per_failed_node(cluster):
    api, server = cluster
    api.add_node({"metadata": {"name": "cpu-only"}})
    pod = gpu_pod("p", [("main", {GPU: 1, MEM: 9000})])
    status, got = post(server, "/filter", {"Pod": pod, "NodeNames": ["n0", "n1", "cpu-only", "ghost"]})
    assert status == 200
    assert got["NodeNames"] == ["n0", "n1"]
    assert set(got["FailedNodes"]) == {"cpu-only", "ghost"}
    assert "inventory" in got["FailedNodes"]["cpu-only"]
    assert got["Error"] == ""


def test_filter_with_node_objects_when_not_cache_capable(cluster):
    _api, server = cluster
    pod = gpu_pod("p", [("main", {GPU: 1, MEM: 20000})])
    nodes = {"items": [{"metadata": {"name": "n0"}}]}
    status, got = post(server, "/filter", {"Pod": pod, "Nodes": nodes})
    assert status == 200 and got["Nodes"]["items"] == [] and "MiB free" in got["FailedNodes"]["n0"]


def test_pod_without_gpu_passes_every_node(cluster):
    _api, server = cluster
    pod = gpu_pod("p", [("main", {"cpu": 1})])
    assert post(server, "/filter", {"Pod": pod, "NodeNames": ["n0", "x"]})[1]["NodeNames"] == ["n0", "x"]


def test_invalid_request_is_unresolvable_not_an_error(cluster):
    _api, server = cluster
    pod = gpu_pod("p", [("main", {GPU: "half"})])
    status, got = post(server, "/filter", {"Pod": pod, "NodeNames": ["n0"]})
    assert status == 200 and "not a quantity" in got["FailedAndUnresolvableNodes"]["n0"]


def test_priority_above_the_admins_default_is_refused_with_the_reason():
    """--default-priority low: a pod asking nvidia.com/priority 0 outside the allowed namespaces never fits
    (FailedAndUnresolvableNodes names why) and is never bound; one naming no priority is recorded low."""
    api = MemoryLegacyApi()
    api.add_node(inventory_node("n0", gpus=2, memory_mib=10000, split=4))
    state = ExtenderState(api, NAMESPACE)
    state.resync()
    defaults = Defaults(priority="low", high_priority_namespaces=("vip",))
    server = ExtenderServer(Extender(state, defaults), "127.0.0.1:0", ready=lambda: "")
    server.start()
    try:
        greedy = gpu_pod("greedy", [("main", {GPU: 1, MEM: 1000, names.LEGACY_PRIORITY: 0})])
        api.add_pod(greedy)
        status, got = post(server, "/filter", {"Pod": greedy, "NodeNames": ["n0"]})
        assert status == 200 and got["NodeNames"] == []
        reason = got["FailedAndUnresolvableNodes"]["n0"]
        assert "nvidia.com/priority: 0 (high) is not allowed in namespace 'team'" in reason, reason
        bind = {"PodName": "greedy", "PodNamespace": "team", "PodUID": "uid-greedy", "Node": "n0"}
        status, got = post(server, "/bind", bind)
        assert status == 200 and "not allowed" in got["Error"] and api.bindings == []
        vip = gpu_pod("vip", [("main", {GPU: 1, MEM: 1000, names.LEGACY_PRIORITY: 0})], ns="vip")
        assert post(server, "/filter", {"Pod": vip, "NodeNames": ["n0"]})[1]["NodeNames"] == ["n0"]
        plain = gpu_pod("plain", [("main", {GPU: 1, MEM: 1000})])
        api.add_pod(plain)
        bind = {"PodName": "plain", "PodNamespace": "team", "PodUID": "uid-plain", "Node": "n0"}
        assert post(server, "/bind", bind) == (200, {"Error": ""})
        record = parse_record(api.get_configmap(NAMESPACE, "carve-legacy-uid-plain"))
        assert record.containers[0].priority == "low"
    finally:
        server.stop()


def test_prioritize_scores_with_go_field_names(cluster):
    api, server = cluster
    first = gpu_pod("first", [("main", {GPU: 1, MEM: 8000})])
    api.add_pod(first)
    assert post(
        server, "/bind", {"PodName": "first", "PodNamespace": "team", "PodUID": "uid-first", "Node": "n1"}
    ) == (
        200,
        {"Error": ""},
    )
    pod = gpu_pod("p", [("main", {GPU: 1, MEM: 1000})])
    status, got = post(server, "/prioritize", {"Pod": pod, "NodeNames": ["n0", "n1"]})
    assert status == 200
    scores = {h["Host"]: h["Score"] for h in got}
    assert scores["n1"] > scores["n0"]  # binpack by default at node level
    pod["metadata"]["annotations"][names.HAMI_NODE_POLICY] = "spread"
    scores = {
        h["Host"]: h["Score"] for h in post(server, "/prioritize", {"Pod": pod, "NodeNames": ["n0", "n1"]})[1]
    }
    assert scores["n0"] > scores["n1"]


def test_bind_records_assignment_and_binds(cluster):
    api, server = cluster
    api.add_pod(gpu_pod("p", [("main", {GPU: 2, MEM: 3000})]))
    status, got = post(
        server, "/bind", {"PodName": "p", "PodNamespace": "team", "PodUID": "uid-p", "Node": "n2"}
    )
    assert (status, got) == (200, {"Error": ""})
    assert api.bindings == [("team", "p", "uid-p", "n2")]
    record = parse_record(api.get_configmap(NAMESPACE, "carve-legacy-uid-p"))
    assert record.node == "n2" and len(record.containers[0].devices) == 2
    assert names.LEGACY_ASSIGNMENT_ANNOTATION in api.get_pod("team", "p")["metadata"]["annotations"]


def test_bind_of_a_recreated_pod_is_refused(cluster):
    api, server = cluster
    api.add_pod(gpu_pod("p", [("main", {GPU: 1})]))
    status, got = post(
        server, "/bind", {"PodName": "p", "PodNamespace": "team", "PodUID": "old-uid", "Node": "n0"}
    )
    assert status == 200 and "deleted and recreated" in got["Error"]
    assert not api.configmaps and not api.bindings


def test_failed_binding_removes_the_record(cluster):
    api, server = cluster
    api.add_pod(gpu_pod("p", [("main", {GPU: 1})]))
    api.fail_binding.add("p")
    _status, got = post(
        server, "/bind", {"PodName": "p", "PodNamespace": "team", "PodUID": "uid-p", "Node": "n0"}
    )
    assert "404" in got["Error"]
    assert not api.configmaps


@pytest.mark.parametrize(
    ("path", "raw", "fragment"),
    [
        ("/filter", b"{not json", "not JSON"),
        ("/filter", b"[1, 2]", "JSON object"),
        ("/filter", b'{"NodeNames": ["n0"]}', "Pod"),
        ("/filter", b'{"Pod": {}, "NodeNames": "n0"}', "NodeNames"),
        ("/prioritize", b'{"Pod": {}}', "NodeNames or Nodes"),
        ("/bind", b'{"PodName": "p"}', "PodNamespace"),
        ("/bind", b"\xff\xfe", "not JSON"),
        ("/filter", b'{"Pod": ' + b"[" * 5000 + b"]" * 5000 + b"}", "body: nested deeper than"),
    ],
)
def test_malformed_input_is_400_with_a_message(cluster, path, raw, fragment):
    _api, server = cluster
    status, got = post(server, path, None, raw=raw)
    assert status == 400 and fragment in got["Error"]
    assert get(server, "/healthz") == (200, "ok")  # still serving


def test_oversized_body_is_413(cluster):
    _api, server = cluster
    status, got = post(server, "/filter", None, raw=b" " * (MAX_BODY + 1))
    assert status == 413 and "limit" in got["Error"]
    assert get(server, "/healthz") == (200, "ok")


def test_huge_content_length_is_refused_without_reading(cluster):
    _api, server = cluster
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("POST", "/bind")
    conn.putheader("Content-Length", str(1 << 40))
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413
    conn.close()
    assert get(server, "/healthz") == (200, "ok")


def test_unknown_route_is_404(cluster):
    _api, server = cluster
    assert post(server, "/preempt", {})[0] == 404


def test_parallel_filter_and_bind_never_over_commit():
    api = MemoryLegacyApi()
    nodes = [f"n{i}" for i in range(20)]
    for n in nodes:
        api.add_node(inventory_node(n, gpus=1, memory_mib=10000, split=4))
    state = ExtenderState(api, NAMESPACE)
    state.resync()
    ext = Extender(state)
    pods = [gpu_pod(f"p{i}", [("main", {GPU: 1, MEM: 3000})]) for i in range(100)]
    for p in pods:
        api.add_pod(p)
    barrier = threading.Barrier(100)
    results = {}

    def one(i, pod):
        barrier.wait()
        # Everyone filters at once and sees room everywhere; groups of 20 race for the same nodes in the same
        # order, trying each until one bind succeeds (as the scheduler's retries would).
        got = ext.filter({"Pod": pod, "NodeNames": nodes})
        start = i % 5
        for node in got["NodeNames"][start:] + got["NodeNames"][:start]:
            meta = pod["metadata"]
            res = ext.bind(
                {"PodName": meta["name"], "PodNamespace": "team", "PodUID": meta["uid"], "Node": node}
            )
            if not res["Error"]:
                results[meta["name"]] = node
                return

    threads = [threading.Thread(target=one, args=(i, p)) for i, p in enumerate(pods)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_gpu = defaultdict(lambda: [0, 0])
    for obj in api.configmaps.values():
        a = parse_record(obj)
        for d in a.containers[0].devices:
            per_gpu[d.uuid][0] += 1
            per_gpu[d.uuid][1] += d.memoryMiB
    assert per_gpu, "nothing was bound"
    assert all(count <= 4 and mem <= 10000 for count, mem in per_gpu.values()), dict(per_gpu)
    assert len(results) == len(api.bindings) == len(api.configmaps)
    # 3 pods of 3000 MiB fit a 10000 MiB GPU: exactly 60 of the 100 bind, whatever the interleaving.
    assert len(results) == 60
    assert all(count == 3 for count, _mem in per_gpu.values())
