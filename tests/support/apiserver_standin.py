"""An HTTP stand-in of the Kubernetes API server for the few resource.k8s.io/v1 endpoints carve uses.

No kube-apiserver can be installed on the CI machine, yet KubeCluster must be tested through the real
`kubernetes` client (its paths, query parameters, JSON and error handling). This server answers on
127.0.0.1 with a random port, keeps objects in memory and behaves like the API server where carve
depends on it:

- GET  /version
- GET  /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}
- GET  /apis/resource.k8s.io/v1/resourceslices   (fieldSelector spec.nodeName, spec.driver, spec.pool.name,
       metadata.name with = == !=; labelSelector with =, ==, !=, key, !key; list items carry no kind)
- POST /apis/resource.k8s.io/v1/resourceslices   (name or generateName; 409 AlreadyExists; dryRun=All
       answers what would be stored without storing it)
- GET, PUT, DELETE /apis/resource.k8s.io/v1/resourceslices/{name}   (PUT with a stale resourceVersion:
       409 Conflict; without one: unconditional)
- for the controller (objects.py's ObjectStore keeps them): GET (list, and `watch=true` from a
  resourceVersion: the events after it, as one response once there are any or `timeoutSeconds` passed;
  410 Expired for a version older than the log) of resourceclaims (all namespaces), resourceslices,
  deviceclasses, carve.dev nodepartitionings and partitioningpolicies, nodes and namespaces;
  GET/POST/PUT of nodepartitionings (and PUT .../status, the status subresource) and of
  coordination.k8s.io leases; POST of core/v1 events. `put_object(plural, obj)` seeds objects.
Every write bumps one resourceVersion counter; `generation` grows when the spec changes. Written slices
are validated against the Kubernetes OpenAPI schema (kubernetes-validate, strict) and rejected with 422
like the real server would; `drop_fields` removes fields of disabled feature gates first, silently, as a
1.34/1.35 server does. Errors are `Status` objects. A bearer token, when set, is required. Every request is
recorded in `requests` so tests can assert what the client sent.

Any test can use it: `from support.apiserver_standin import ApiServerStandIn` (tests/ is on sys.path
through tests/conftest.py, which also defines the `apiserver` fixture).
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import kubernetes_validate
import yaml
from support.apiserver_objects import ApiError, ObjectRoutes, _WatchStream

from driver.cluster.gates import check_drop_fields, drop_disabled_fields
from driver.cluster.objects import ADDED, DELETED, MODIFIED, ObjectStore

GROUP_PREFIX = "/apis/resource.k8s.io/v1"
SLICES = f"{GROUP_PREFIX}/resourceslices"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SLICE_FIELDS = {
    "spec.nodeName": lambda o: o["spec"].get("nodeName", ""),
    "spec.driver": lambda o: o["spec"].get("driver", ""),
    "spec.pool.name": lambda o: (o["spec"].get("pool") or {}).get("name", ""),
    "metadata.name": lambda o: o["metadata"]["name"],
}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any = None


@dataclass
class Store:
    """The server's state; one lock for all of it."""

    drop_fields: frozenset[str] = frozenset()
    validate_version: str | None = "1.34.0"
    rv: int = 0
    slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)


class ApiServerStandIn(ObjectRoutes):
    """Start with `start()` (or as a context manager); `url`, `kubeconfig(path)`, `put_claim(obj)`."""

    def __init__(
        self,
        drop_fields: set[str] | frozenset[str] = frozenset(),
        version: tuple[str, str] = ("1", "34"),
        token: str | None = "standin-token",
        validate_version: str | None = "1.34.0",
    ) -> None:
        self.store = Store(drop_fields=check_drop_fields(drop_fields), validate_version=validate_version)
        self.version = version
        self.token = token
        self.requests: list[Recorded] = []
        self.objects = ObjectStore(self.store.lock, self.store.next_rv)
        self.max_watch_s = 30.0  # a watch answers after at most this long, events or not
        self._faults: list[list[Any]] = []  # [method, path, code, reason, times left, dry run]
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> ApiServerStandIn:
        standin = self

        class Handler(_Handler):
            server_state = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # Keep-alive connections of the client hold handler threads; do not wait for them on close.
        self._server.daemon_threads = True
        self._server.block_on_close = False
        # A short poll interval keeps shutdown (once per test) fast.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="apiserver-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ApiServerStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig pointing at this server (token auth) and return its path."""
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "carve", "user": user}],
            "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "carve"}}],
            "current-context": "standin",
        }
        path.write_text(yaml.safe_dump(doc))
        return path

    # -- test helpers ---------------------------------------------------------------------------------

    def put_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a ResourceClaim as the scheduler would have left it (status included)."""
        with self.store.lock:
            stored = copy.deepcopy(obj)
            stored.update(apiVersion="resource.k8s.io/v1", kind="ResourceClaim")
            meta = stored.setdefault("metadata", {})
            meta.setdefault("namespace", "default")
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta["resourceVersion"] = self.store.next_rv()
            old = self.store.claims.get((meta["namespace"], meta["name"]))
            self.store.claims[(meta["namespace"], meta["name"])] = stored
            self.objects.log("resourceclaims", MODIFIED if old else ADDED, stored)
            return copy.deepcopy(stored)

    def delete_claim(self, namespace: str, name: str) -> None:
        with self.store.lock:
            old = self.store.claims.pop((namespace, name))
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": self.store.next_rv()}}
            self.objects.log("resourceclaims", DELETED, gone)

    def put_object(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Seed or overwrite an object of another kind (Node, Namespace, DeviceClass, policy, ...)."""
        return self.objects.put(plural, obj)

    def fail_next(
        self,
        method: str,
        path: str,
        code: int = 500,
        reason: str = "InternalError",
        times: int = 1,
        dry_run: bool = False,
    ) -> None:
        """Answer the next `times` requests `method path` (path as sent, without query) with an error.

        Only requests that are (dry_run=True) or are not (the default) dry runs (`dryRun=All`) match.
        """
        with self.store.lock:
            self._faults.append([method, path, code, reason, times, dry_run])

    def _injected(self, method: str, path: str, dry_run: bool) -> ApiError | None:
        with self.store.lock:
            for fault in self._faults:
                if fault[0] == method and fault[1] == path and fault[4] > 0 and fault[5] == dry_run:
                    fault[4] -= 1
                    return ApiError(fault[2], fault[3], f"injected failure of {method} {path}")
        return None

    def slices(self) -> dict[str, dict[str, Any]]:
        with self.store.lock:
            return copy.deepcopy(self.store.slices)

    # -- request handling (called by the handler threads) ---------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        injected = self._injected(method, path, query.get("dryRun") == ["All"])
        if injected is not None:
            raise injected
        if path in ("/version", "/version/"):
            major, minor = self.version
            return 200, {
                "major": major,
                "minor": minor,
                "gitVersion": f"v{major}.{minor.rstrip('+')}.0",
                "gitCommit": "0" * 40,
                "gitTreeState": "clean",
                "buildDate": "2025-08-27T00:00:00Z",
                "goVersion": "go1.24.6",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        parts = [unquote(p) for p in path.split("/") if p]
        handled = self._handle_objects(method, parts, query, body)
        if handled is not None:
            return handled
        # apis resource.k8s.io v1 namespaces {ns} resourceclaims {name}
        if parts[:3] == ["apis", "resource.k8s.io", "v1"]:
            rest = parts[3:]
            if len(rest) == 4 and rest[0] == "namespaces" and rest[2] == "resourceclaims" and method == "GET":
                return 200, self._get_claim(rest[1], rest[3])
            if rest == ["resourceslices"]:
                if method == "GET":
                    return 200, self._list_slices(query)
                if method == "POST":
                    return 201, self._create_slice(body, dry_run=query.get("dryRun") == ["All"])
            if len(rest) == 2 and rest[0] == "resourceslices":
                if method == "GET":
                    return 200, self._get_slice(rest[1])
                if method == "PUT":
                    return 200, self._replace_slice(rest[1], body)
                if method == "DELETE":
                    return 200, self._delete_slice(rest[1])
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")

    def _get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self.store.lock:
            try:
                return copy.deepcopy(self.store.claims[(namespace, name)])
            except KeyError:
                raise ApiError(
                    404,
                    "NotFound",
                    f'resourceclaims.resource.k8s.io "{name}" not found',
                    name,
                    "resourceclaims",
                ) from None

    def _list_slices(self, query: dict[str, list[str]]) -> dict[str, Any]:
        field_terms = _parse_selector(query.get("fieldSelector", [""])[0])
        label_terms = _parse_selector(query.get("labelSelector", [""])[0])
        for key, _, _ in field_terms:
            if key not in _SLICE_FIELDS:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'"{key}" is not a known field selector: only "{", ".join(_SLICE_FIELDS)}"',
                )
        with self.store.lock:
            items = []
            for obj in self.store.slices.values():
                fields_ok = all(_term_holds(op, _SLICE_FIELDS[k](obj), v) for k, op, v in field_terms)
                labels = obj["metadata"].get("labels") or {}
                labels_ok = all(_label_holds(k, op, v, labels) for k, op, v in label_terms)
                if fields_ok and labels_ok:
                    item = copy.deepcopy(obj)
                    # Like the real server, items of a list carry no TypeMeta.
                    item.pop("apiVersion", None)
                    item.pop("kind", None)
                    items.append(item)
            items.sort(key=lambda o: o["metadata"]["name"])
            return {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSliceList",
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": items,
            }

    def _get_slice(self, name: str) -> dict[str, Any]:
        with self.store.lock:
            return copy.deepcopy(self._existing(name))

    def _create_slice(self, body: Any, dry_run: bool = False) -> dict[str, Any]:
        obj = self._check_body(body)
        meta = obj.setdefault("metadata", {})
        with self.store.lock:
            name = meta.get("name") or ""
            if not name and meta.get("generateName"):
                name = meta["generateName"] + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))
            if not name:
                raise ApiError(422, "Invalid", "ResourceSlice is invalid: metadata.name: Required value")
            if name in self.store.slices:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'resourceslices.resource.k8s.io "{name}" already exists',
                    name,
                    "resourceslices",
                )
            meta["name"] = name
            stored = self._admit(obj)
            stored["metadata"].update(uid=str(uuid.uuid4()), generation=1, creationTimestamp=_now())
            if dry_run:  # admitted (fields of disabled gates dropped, validated) but not persisted
                return copy.deepcopy(stored)
            stored["metadata"]["resourceVersion"] = self.store.next_rv()
            self.store.slices[name] = stored
            self.objects.log("resourceslices", ADDED, stored)
            return copy.deepcopy(stored)

    def _replace_slice(self, name: str, body: Any) -> dict[str, Any]:
        obj = self._check_body(body)
        meta = obj.setdefault("metadata", {})
        if meta.get("name") != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does not match the URL ({name})",
            )
        with self.store.lock:
            old = self._existing(name)
            want = meta.get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on resourceslices.resource.k8s.io "{name}": the object '
                    "has been modified; please apply your changes to the latest version and try again",
                    name,
                    "resourceslices",
                )
            stored = self._admit(obj)
            for key in ("uid", "creationTimestamp"):
                stored["metadata"][key] = old["metadata"][key]
            changed = stored.get("spec") != old.get("spec")
            stored["metadata"]["generation"] = old["metadata"]["generation"] + (1 if changed else 0)
            stored["metadata"]["resourceVersion"] = self.store.next_rv()
            self.store.slices[name] = stored
            self.objects.log("resourceslices", MODIFIED, stored)
            return copy.deepcopy(stored)

    def _delete_slice(self, name: str) -> dict[str, Any]:
        with self.store.lock:
            old = self._existing(name)
            del self.store.slices[name]
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": self.store.next_rv()}}
            self.objects.log("resourceslices", DELETED, gone)
            return copy.deepcopy(old)

    def _existing(self, name: str) -> dict[str, Any]:
        try:
            return self.store.slices[name]
        except KeyError:
            raise ApiError(
                404, "NotFound", f'resourceslices.resource.k8s.io "{name}" not found', name, "resourceslices"
            ) from None

    @staticmethod
    def _check_body(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "request body must be a JSON object")
        if body.get("apiVersion") != "resource.k8s.io/v1" or body.get("kind") != "ResourceSlice":
            raise ApiError(
                400,
                "BadRequest",
                f"expected resource.k8s.io/v1 ResourceSlice, got {body.get('apiVersion')} {body.get('kind')}",
            )
        return copy.deepcopy(body)

    def _admit(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Drop disabled-gate fields, then validate like the API server; returns the object to store."""
        stored = drop_disabled_fields(obj, self.store.drop_fields)
        if self.store.validate_version:
            try:
                kubernetes_validate.validate(stored, self.store.validate_version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = ".".join(str(p) for p in e.path)
                raise ApiError(
                    422,
                    "Invalid",
                    f"ResourceSlice.resource.k8s.io is invalid: {where}: {e.message}",
                    obj["metadata"].get("name", ""),
                    "resourceslices",
                ) from None
        return stored


class _Handler(BaseHTTPRequestHandler):
    server_state: ApiServerStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures anyway
        pass

    def _serve(self, method: str) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        state = self.server_state
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        state.requests.append(Recorded(method, split.path, query, body))
        try:
            if state.token and self.headers.get("Authorization") != f"Bearer {state.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            code, payload = state.handle(method, split.path, query, body)
        except ApiError as e:
            code, payload = e.code, e.status()
        if isinstance(payload, _WatchStream):
            data = b"".join(json.dumps(ev).encode() + b"\n" for ev in payload)
        else:
            data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")


def _parse_selector(text: str) -> list[tuple[str, str, str]]:
    """ "a=b,c!=d,e,!f" -> [(a, =, b), (c, !=, d), (e, exists, ""), (f, !exists, "")]."""
    terms = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        for op in ("!=", "==", "="):
            if op in part:
                key, value = part.split(op, 1)
                terms.append((key.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            terms.append((part[1:], "!exists", "") if part.startswith("!") else (part, "exists", ""))
    return terms


def _term_holds(op: str, actual: str, value: str) -> bool:
    return actual == value if op == "=" else actual != value


def _label_holds(key: str, op: str, value: str, labels: dict[str, str]) -> bool:
    if op == "exists":
        return key in labels
    if op == "!exists":
        return key not in labels
    if op == "=":
        return labels.get(key) == value
    return labels.get(key) != value


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
