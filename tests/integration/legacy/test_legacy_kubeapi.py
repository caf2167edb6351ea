"""KubeLegacyApi through the real `kubernetes` client against a small HTTP stand-in of the API server: the
paths, verbs and content types on the wire (a merge patch must not go out as a JSON Patch), errors mapped to
NotFound / AlreadyExists / Conflict, and a whole bind through it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from support.legacy_node import NAMESPACE, gpu_pod, inventory_node

from driver import names
from driver.cluster.base import AlreadyExists, Conflict, NotFound
from driver.cluster.kube import load_api_client
from driver.legacy.extender.state import ExtenderState
from driver.legacy.extender.verbs import Extender
from driver.legacy.kubeapi import KubeLegacyApi
from driver.legacy.records import parse_record

KINDS = {"pods": "Pod", "nodes": "Node", "configmaps": "ConfigMap", "leases": "Lease"}


class StandIn:
    """Objects by path (/api/v1/namespaces/ns/pods/name); collections listed from them; requests recorded."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.requests: list[tuple[str, str, str]] = []  # method, path, content type
        self.rv = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _go(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                outer.requests.append(
                    (method, urlparse(self.path).path, self.headers.get("Content-Type", ""))
                )
                code, obj = outer.handle(method, self.path, body, self.headers.get("Content-Type", ""))
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._go("GET")

            def do_POST(self):
                self._go("POST")

            def do_PUT(self):
                self._go("PUT")

            def do_PATCH(self):
                self._go("PATCH")

            def do_DELETE(self):
                self._go("DELETE")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def put(self, path: str, obj: dict) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.objects[path] = obj

    @staticmethod
    def status(code: int, reason: str) -> tuple[int, dict]:
        return code, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "code": code,
        }

    def handle(self, method: str, raw: str, body, ctype: str) -> tuple[int, dict]:
        url = urlparse(raw)
        path, query = url.path.rstrip("/"), parse_qs(url.query)
        parts = path.split("/")
        if method == "POST" and path.endswith("/binding"):
            pod = self.objects.get(path.removesuffix("/binding"))
            if pod is None:
                return self.status(404, "NotFound")
            pod.setdefault("spec", {})["nodeName"] = body["target"]["name"]
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        if parts[-1] in KINDS or (parts[-1] == "pods" and "namespaces" not in parts):  # a collection
            resource = parts[-1]
            if method == "POST":
                target = f"{path}/{body['metadata']['name']}"
                if target in self.objects:
                    return self.status(409, "AlreadyExists")
                self.put(target, body)
                return 201, body
            prefix = path + "/" if "namespaces" in parts else None
            items = [
                o
                for p, o in self.objects.items()
                if p.split("/")[-2] == resource and (prefix is None or p.startswith(prefix))
            ]
            for sel in query.get("labelSelector", []):
                key, _, value = sel.partition("=")
                items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
            if query.get("fieldSelector") == ["spec.nodeName!="]:
                items = [o for o in items if (o.get("spec") or {}).get("nodeName")]
            return 200, {"kind": f"{KINDS[resource]}List", "apiVersion": "v1", "metadata": {}, "items": items}
        obj = self.objects.get(path)
        if obj is None:
            return self.status(404, "NotFound")
        if method == "GET":
            return 200, obj
        if method == "DELETE":
            del self.objects[path]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if method == "PATCH":
            if ctype != "application/merge-patch+json":
                return self.status(415, "UnsupportedMediaType")
            obj["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
            return 200, obj
        if method == "PUT":
            if body["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                return self.status(409, "Conflict")
            self.put(path, body)
            return 200, body
        return self.status(405, "MethodNotAllowed")


@pytest.fixture
def standin(tmp_path):
    s = StandIn()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": f"http://127.0.0.1:{s.httpd.server_address[1]}"}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    yield s, KubeLegacyApi(load_api_client(kubeconfig))
    s.httpd.shutdown()
    s.httpd.server_close()


def test_a_bind_through_the_client(standin):
    s, api = standin
    node = inventory_node("n0", gpus=1, memory_mib=10000)
    node.update(apiVersion="v1", kind="Node")
    s.put("/api/v1/nodes/n0", node)
    pod = gpu_pod("p", [("main", {names.LEGACY_GPU: 1, names.LEGACY_GPUMEM: 1000})])
    pod.update(apiVersion="v1", kind="Pod")
    s.put("/api/v1/namespaces/team/pods/p", pod)
    state = ExtenderState(api, NAMESPACE)
    state.resync()
    ext = Extender(state)
    assert ext.filter({"Pod": pod, "NodeNames": ["n0"]})["NodeNames"] == ["n0"]
    assert ext.bind({"PodName": "p", "PodNamespace": "team", "PodUID": "uid-p", "Node": "n0"}) == {
        "Error": ""
    }
    record = parse_record(api.get_configmap(NAMESPACE, "carve-legacy-uid-p"))
    assert record.containers[0].devices[0].memoryMiB == 1000
    assert s.objects["/api/v1/namespaces/team/pods/p"]["spec"]["nodeName"] == "n0"
    assert names.LEGACY_ASSIGNMENT_ANNOTATION in api.get_pod("team", "p")["metadata"]["annotations"]
    assert ("POST", "/api/v1/namespaces/team/pods/p/binding") in [r[:2] for r in s.requests]
    patches = [r for r in s.requests if r[0] == "PATCH"]
    assert patches and all(r[2] == "application/merge-patch+json" for r in patches)


def test_errors_map_to_the_cluster_exceptions(standin):
    _s, api = standin
    with pytest.raises(NotFound):
        api.get_pod("team", "ghost")
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": NAMESPACE},
        "data": {},
    }
    api.create_configmap(cm)
    with pytest.raises(AlreadyExists):
        api.create_configmap(cm)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": NAMESPACE},
        "spec": {"holderIdentity": "a"},
    }
    created = api.create_lease(lease)
    created["metadata"]["resourceVersion"] = "stale"
    with pytest.raises(Conflict):
        api.update_lease(created)
    api.delete_configmap(NAMESPACE, "a")
    with pytest.raises(NotFound):
        api.delete_configmap(NAMESPACE, "a")
