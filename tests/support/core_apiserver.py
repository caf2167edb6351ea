"""An HTTP stand-in of the API server's core/v1 pods, nodes and configmaps and coordination/v1 leases, the
kinds the legacy shim uses (driver/legacy/kubeapi.py), for tests that go through the real `kubernetes` client.

Objects are kept by path (/api/v1/namespaces/ns/pods/name); collections are listed from them with
labelSelector `k=v` and fieldSelector `spec.nodeName!=`; lists carry the server's resourceVersion. Every
write (POST, PUT, merge PATCH, DELETE, pods/binding, `put`, `delete`) bumps one resourceVersion counter and
appends a watch event. `GET <collection>?watch=true&resourceVersion=X` answers the events after X as
newline-delimited JSON once there are any or `timeoutSeconds` (at most `max_watch_s`) passed, the way one
watch request of the real server ends at its timeout; a version older than the retained log (`compact()`
drops it) is answered with an ERROR event carrying a 410 Expired Status, as the real server does. Every
request is recorded (method, path, content type, query, bearer token, body) in `requests`;
`fail_next(method, path, code)` injects errors.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlparse

KINDS = {"pods": "Pod", "nodes": "Node", "configmaps": "ConfigMap", "leases": "Lease"}


class CoreRequest(NamedTuple):
    method: str
    path: str
    ctype: str
    query: dict[str, list[str]]
    token: str  # the bearer token: which component (kubeconfig) sent it
    body: Any


class CoreApiStandIn:
    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.requests: list[CoreRequest] = []
        self.rv = 0
        self.events: list[tuple[int, str, str, dict]] = []  # rv, type, path, object
        self.oldest_rv = 0  # watches from before this version get 410 Expired
        self.max_watch_s = 5.0
        self.faults: list[list] = []  # [method, path, code, times left]
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _go(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                ctype = self.headers.get("Content-Type", "")
                url = urlparse(self.path)
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                outer.requests.append(CoreRequest(method, url.path, ctype, parse_qs(url.query), token, body))
                code, payload = outer.handle(method, self.path, body, ctype)
                if isinstance(payload, list):  # watch events, one JSON document per line
                    data = b"".join(json.dumps(e).encode() + b"\n" for e in payload)
                else:
                    data = json.dumps(payload).encode()
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
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    # --- test helpers ------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def kubeconfig(self, path: Path, token: str = "t") -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": self.url}}],
                    "users": [{"name": "u", "user": {"token": token}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        return path

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def put(self, path: str, obj: dict) -> dict:
        with self.cond:
            kind = "MODIFIED" if path in self.objects else "ADDED"
            self.objects[path] = obj
            self._log(kind, path, obj)
            return obj

    def delete(self, path: str) -> None:
        with self.cond:
            obj = self.objects.pop(path)
            self._log("DELETED", path, obj)

    def compact(self) -> None:
        """Forget the event log, as etcd compaction does: a watch from any version up to now gets 410 (once a
        write follows, a list gives a version that can be watched again)."""
        with self.cond:
            self.events.clear()
            self.oldest_rv = self.rv + 1

    def fail_next(self, method: str, path: str, code: int = 500, times: int = 1) -> None:
        with self.cond:
            self.faults.append([method, path, code, times])

    # --- serving -----------------------------------------------------------------------------------------

    def _log(self, kind: str, path: str, obj: dict) -> None:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, path, copy.deepcopy(obj)))
        self.cond.notify_all()

    @staticmethod
    def status(code: int, reason: str) -> tuple[int, dict]:
        return code, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "code": code,
        }

    def handle(self, method: str, raw: str, body, ctype: str) -> tuple[int, dict | list]:
        url = urlparse(raw)
        path, query = url.path.rstrip("/"), parse_qs(url.query)
        with self.cond:
            for f in self.faults:
                if f[0] == method and f[1] == path and f[3] > 0:
                    f[3] -= 1
                    return self.status(f[2], "InternalError")
        parts = path.split("/")
        if method == "POST" and path.endswith("/binding"):
            with self.cond:
                pod = self.objects.get(path.removesuffix("/binding"))
                if pod is None:
                    return self.status(404, "NotFound")
                pod.setdefault("spec", {})["nodeName"] = body["target"]["name"]
                self.put(path.removesuffix("/binding"), pod)
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        if parts[-1] in KINDS:  # a collection
            return self._collection(method, path, parts[-1], query, body)
        with self.cond:
            obj = self.objects.get(path)
            if obj is None:
                return self.status(404, "NotFound")
            if method == "GET":
                return 200, copy.deepcopy(obj)
            if method == "DELETE":
                self.delete(path)
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
            if method == "PATCH":
                if ctype != "application/merge-patch+json":
                    return self.status(415, "UnsupportedMediaType")
                obj["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
                return 200, copy.deepcopy(self.put(path, obj))
            if method == "PUT":
                if body["metadata"].get("resourceVersion") != obj["metadata"]["resourceVersion"]:
                    return self.status(409, "Conflict")
                return 200, copy.deepcopy(self.put(path, body))
        return self.status(405, "MethodNotAllowed")

    def _collection(self, method: str, path: str, resource: str, query, body) -> tuple[int, dict | list]:
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            with self.cond:
                if target in self.objects:
                    return self.status(409, "AlreadyExists")
                return 201, copy.deepcopy(self.put(target, body))
        prefix = path + "/" if "namespaces" in path.split("/") else ""  # else: all namespaces

        def selected(p: str, o: dict) -> bool:
            if p.split("/")[-2] != resource or not p.startswith(prefix):
                return False
            for sel in query.get("labelSelector", []):
                key, _, value = sel.partition("=")
                if (o["metadata"].get("labels") or {}).get(key) != value:
                    return False
            unscheduled = not (o.get("spec") or {}).get("nodeName")
            return not (query.get("fieldSelector") == ["spec.nodeName!="] and unscheduled)

        if query.get("watch") in (["true"], ["1"], ["True"]):
            return 200, self._watch(selected, query)
        with self.cond:
            items = [copy.deepcopy(o) for p, o in self.objects.items() if selected(p, o)]
            return 200, {
                "kind": f"{KINDS[resource]}List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }

    def _watch(self, selected, query) -> list[dict]:
        since = int((query.get("resourceVersion") or ["0"])[0] or 0)
        timeout = min(float((query.get("timeoutSeconds") or [self.max_watch_s])[0]), self.max_watch_s)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if since < self.oldest_rv:
                    gone = self.status(410, "Expired")[1]
                    gone["message"] = f"too old resource version: {since} ({self.oldest_rv})"
                    return [{"type": "ERROR", "object": gone}]
                out = [
                    {"type": kind, "object": obj}
                    for rv, kind, path, obj in self.events
                    if rv > since and selected(path, obj)
                ]
                left = deadline - time.monotonic()
                if out or left <= 0:
                    return out
                self.cond.wait(left)
