"""An HTTP stand-in of the Kubernetes API server, for tests that go through the real `kubernetes` client.

No kube-apiserver can be installed on the CI machine, yet KubeCluster (the plugin and the controller) and
KubeLegacyApi (the legacy shim) must be tested through the client (its paths, query parameters, content
types, JSON and error handling). This server answers on 127.0.0.1 with a random port, keeps objects in
memory (apiserver_objects.py's ApiObjects, addressed by API path) and behaves like the API server where
carve depends on it. It serves:

- GET /version
- core/v1 pods, configmaps, events (namespaced), nodes and namespaces; coordination.k8s.io/v1 leases;
  resource.k8s.io/v1 resourceclaims, resourceslices and deviceclasses; carve.dev/v1alpha1
  nodepartitionings and partitioningpolicies. Each kind: list (per namespace, or across all namespaces
  for a namespaced kind), watch, GET, POST (name or generateName; 409 AlreadyExists), PUT (409 Conflict
  on a stale resourceVersion, unconditional without one; `generation` grows when the spec changes),
  PATCH (JSON merge patch only, else 415) and DELETE. PUT .../status is the status subresource of the
  kinds that have one (nodepartitionings); POST pods/{name}/binding sets the pod's spec.nodeName.
- lists and watches filter by fieldSelector (metadata.name, metadata.namespace, and the fields the real
  server indexes: a pod's spec.nodeName, a slice's spec.nodeName, spec.driver, spec.pool.name; with = ==
  !=; others 400) and labelSelector (=, ==, !=, key, !key). List items carry no kind.
- `GET <collection>?watch=true&resourceVersion=X`: the events after X, as newline-delimited JSON in one
  response, once there are any or `timeoutSeconds` (at most `max_watch_s`) passed, the way one watch
  request of the real server ends at its timeout. A version older than the log (`compact()` forgets it,
  as etcd compaction does) gets an ERROR event carrying a 410 Expired Status, as the real server sends.
- ResourceSlices written are validated against the Kubernetes OpenAPI schema (kubernetes-validate, strict)
  and rejected with 422 like the real server would; `drop_fields` removes fields of disabled feature gates
  first, silently, as a 1.34/1.35 server does; `dryRun=All` answers what would be stored, storing nothing.

Every write bumps one resourceVersion counter and appends to one watch log. Errors are `Status` objects.
A bearer token is required when `token` is set (also accepted: any token a `kubeconfig(path, token=...)`
was written with, so components can be told apart). Every request is recorded in `requests` (method,
path, query, body, content type, bearer token) so tests can assert what the client sent and derive RBAC
verbs from it (support/rbac.py). `fail_next(method, path, code)` injects errors. Test helpers write
straight into the store, unrecorded: `put(path, obj)`, `delete(path)`, `put_object(plural, obj)`,
`put_claim(obj)`, `delete_claim(ns, name)`; `objects[path]` reads one object, `slices()` all slices.

Any test can use it: `from support.apiserver_standin import ApiServerStandIn` (tests/ is on sys.path
through tests/conftest.py, which also defines the `apiserver` fixture).
"""

from __future__ import annotations

import copy
import json
import secrets
import ssl
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import yaml
from support.apiserver_objects import ApiError, ApiObjects, Location, locate, merge_patch

from driver.cluster.base import AlreadyExists, ClusterError, Conflict, NotFound
from driver.cluster.gates import check_drop_fields, drop_disabled_fields
from driver.cluster.objects import STATUS_SUBRESOURCE, now_rfc3339, stored_new

_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MERGE_PATCH = "application/merge-patch+json"


class Recorded(NamedTuple):
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any = None
    ctype: str = ""
    token: str = ""  # the bearer token sent: which component (kubeconfig) made the request


class ApiServerStandIn:
    """Start with `start()` (or as a context manager); `url`, `kubeconfig(path)`, the test helpers."""

    def __init__(
        self,
        drop_fields: set[str] | frozenset[str] = frozenset(),
        version: tuple[str, str] = ("1", "34"),
        token: str | None = "standin-token",
        validate_version: str | None = "1.34.0",
    ) -> None:
        self.drop_fields = check_drop_fields(drop_fields)
        self.validate_version = validate_version
        self.version = version
        self.token = token
        self.tokens: set[str] = set()  # tokens of kubeconfig(path, token=...), accepted too
        self.requests: list[Recorded] = []
        self.objects = ApiObjects()
        self.max_watch_s = 30.0  # a watch answers after at most this long, events or not
        self._faults: list[list[Any]] = []  # [method, path, code, reason, times left, dry run]
        self._server: ThreadingHTTPServer | None = None
        self._tls = False

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self, tls: tuple[Path, Path] | None = None) -> ApiServerStandIn:
        """Serve on 127.0.0.1; with `tls` (certificate, key), over HTTPS as the in-cluster loader wants."""
        standin = self

        class Handler(_Handler):
            server_state = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._tls = tls is not None
        # Keep-alive connections of the client hold handler threads; do not wait for them on close.
        self._server.daemon_threads = True
        self._server.block_on_close = False
        # A short poll interval keeps shutdown (once per test) fast.
        threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="apiserver-standin", daemon=True
        ).start()
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
        return f"{'https' if self._tls else 'http'}://{host}:{port}"

    def kubeconfig(self, path: Path, token: str | None = None) -> Path:
        """Write a kubeconfig pointing at this server and return its path. Its bearer token is `token`
        (then accepted from now on, and recorded with each request it makes) or else the server's."""
        if token is not None:
            self.tokens.add(token)
        token = token if token is not None else self.token
        user: dict[str, Any] = {"token": token} if token else {}
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

    # -- test helpers (straight into the store, not recorded) ---------------------------------------

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite the object at an API path (/api/v1/namespaces/team/pods/p)."""
        return self.objects.put_path(path, obj)

    def delete(self, path: str) -> None:
        self.objects.delete_path(path)

    def compact(self) -> None:
        self.objects.compact()

    def put_object(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Seed or overwrite an object of any kind (Node, Namespace, DeviceClass, policy, ...)."""
        return self.objects.put(plural, obj)

    def put_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a ResourceClaim as the scheduler would have left it (status included)."""
        claim = copy.deepcopy(obj)
        claim.update(apiVersion="resource.k8s.io/v1", kind="ResourceClaim")
        meta = claim.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        return self.objects.put("resourceclaims", claim)

    def delete_claim(self, namespace: str, name: str) -> None:
        self.objects.delete("resourceclaims", namespace, name)

    def slices(self) -> dict[str, dict[str, Any]]:
        return {s["metadata"]["name"]: s for s in self.objects.list("resourceslices")}

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
        with self.objects.lock:
            self._faults.append([method, path.rstrip("/"), code, reason, times, dry_run])

    def _injected(self, method: str, path: str, dry_run: bool) -> ApiError | None:
        with self.objects.lock:
            for fault in self._faults:
                if fault[0] == method and fault[1] == path and fault[4] > 0 and fault[5] == dry_run:
                    fault[4] -= 1
                    return ApiError(fault[2], fault[3], f"injected failure of {method} {path}")
        return None

    # -- request handling (called by the handler threads) ---------------------------------------------

    def authorized(self, header: str) -> bool:
        return not self.token or bearer(header) in {self.token, *self.tokens}

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: Any, ctype: str = ""
    ) -> tuple[int, Any]:
        path = path.rstrip("/") or "/"
        dry_run = query.get("dryRun") == ["All"]
        injected = self._injected(method, path, dry_run)
        if injected is not None:
            raise injected
        if path == "/version":
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
        loc = locate(path)
        if loc is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({method} {path})"
            )
        try:
            return self._route(method, loc, query, body, ctype, dry_run)
        except NotFound as e:
            raise ApiError(
                404, "NotFound", f'{_qualified(loc)} "{e.name}" not found', e.name, loc.plural
            ) from None
        except AlreadyExists as e:
            raise ApiError(
                409, "AlreadyExists", f'{_qualified(loc)} "{e.name}" already exists', e.name, loc.plural
            ) from None
        except Conflict as e:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {_qualified(loc)} "{e.name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                e.name,
                loc.plural,
            ) from None
        except ClusterError as e:
            raise ApiError(e.status or 422, "Invalid", str(e), e.name, loc.plural) from None

    def _route(
        self, method: str, loc: Location, query: dict[str, list[str]], body: Any, ctype: str, dry_run: bool
    ) -> tuple[int, Any]:
        objects = self.objects
        if not loc.name:  # a collection
            if method == "GET" and query.get("watch") in (["true"], ["1"], ["True"]):
                timeout = min(float((query.get("timeoutSeconds") or [self.max_watch_s])[0]), self.max_watch_s)
                return 200, _WatchStream(objects.watch_at(loc, query, timeout))
            if method == "GET":
                return 200, objects.list_at(loc, query)
            if method == "POST" and (loc.namespace or not loc.resource.namespaced):
                return 201, self._create(loc, self._body(loc, body), dry_run)
        elif loc.sub == "binding" and loc.plural == "pods" and method == "POST":
            with objects.lock:
                pod = objects.get("pods", loc.namespace, loc.name)
                pod.setdefault("spec", {})["nodeName"] = body["target"]["name"]
                objects.update("pods", pod)
            return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        elif not loc.sub or (loc.sub == "status" and loc.plural in STATUS_SUBRESOURCE | {"resourceclaims"}):
            status = loc.sub == "status"
            if method == "GET":
                return 200, objects.get(loc.plural, loc.namespace, loc.name)
            if method == "PUT":
                obj = self._body(loc, body)
                if obj["metadata"].get("name") != loc.name:
                    raise ApiError(
                        400,
                        "BadRequest",
                        f"the name of the object ({obj['metadata'].get('name')}) does not match the URL "
                        f"({loc.name})",
                    )
                if loc.plural == "resourceslices":
                    obj = self._admit_slice(obj)
                return 200, objects.update(loc.plural, obj, status=status)
            if method == "PATCH":
                if ctype.split(";")[0].strip() != MERGE_PATCH:
                    raise ApiError(415, "UnsupportedMediaType", f"the body of a PATCH must be {MERGE_PATCH}")
                with objects.lock:
                    patched = merge_patch(objects.get(loc.plural, loc.namespace, loc.name), body)
                    if loc.plural == "resourceslices":
                        patched = self._admit_slice(patched)
                    return 200, objects.update(loc.plural, patched, status=status)
            if method == "DELETE" and not status:
                with objects.lock:
                    old = objects.get(loc.plural, loc.namespace, loc.name)
                    objects.delete(loc.plural, loc.namespace, loc.name)
                return 200, old
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {loc.path}")

    @staticmethod
    def _body(loc: Location, body: Any) -> dict[str, Any]:
        """The object sent, checked to be of the path's kind; its namespace is the path's."""
        want = (loc.resource.api_version, loc.resource.kind)
        if not isinstance(body, dict) or (body.get("apiVersion"), body.get("kind")) != want:
            got = (
                (body.get("apiVersion"), body.get("kind")) if isinstance(body, dict) else type(body).__name__
            )
            raise ApiError(400, "BadRequest", f"expected a {want[0]} {want[1]}, got {got}")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if loc.namespace:
            meta["namespace"] = loc.namespace
        return obj

    def _create(self, loc: Location, obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        meta = obj["metadata"]
        with self.objects.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    secrets.choice(_SUFFIX_ALPHABET) for _ in range(5)
                )
            if not meta.get("name"):
                raise ApiError(
                    422, "Invalid", f"{loc.resource.kind} is invalid: metadata.name: Required value"
                )
            if loc.plural == "resourceslices":
                obj = self._admit_slice(obj)
            if not dry_run:
                return self.objects.create(loc.plural, obj)
            try:  # admitted (fields of disabled gates dropped, validated) but not persisted
                self.objects.get(loc.plural, loc.namespace, meta["name"])
            except NotFound:
                stored = stored_new(loc.plural, obj, "")
                del stored["metadata"]["resourceVersion"]
                return stored
            raise AlreadyExists("", loc.plural, meta["name"])

    def _admit_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Drop disabled-gate fields, then validate like the API server; returns the object to store."""
        stored = drop_disabled_fields(obj, self.drop_fields)
        if self.validate_version:
            try:
                kubernetes_validate.validate(stored, self.validate_version, strict=True)
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


def bearer(header: str) -> str:
    """The token of an Authorization header; the scheme's case does not matter, as in the API server (the
    in-cluster loader sends `bearer <token>`)."""
    scheme, _, token = header.partition(" ")
    return token if scheme.lower() == "bearer" else ""


def _qualified(loc: Location) -> str:
    """`resourceslices.resource.k8s.io`, `pods`: how the real server names a resource in its messages."""
    group = loc.resource.api_version.rpartition("/")[0]
    return f"{loc.plural}.{group}" if group else loc.plural


class _WatchStream(list):
    """Watch events, sent as newline-delimited JSON (the watch wire format) instead of one document."""


class _Handler(BaseHTTPRequestHandler):
    server_state: ApiServerStandIn
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as Go's net/http sets it: the headers and the body go out as two writes, and with Nagle on
    # the body waits for the client's delayed ACK of the headers (40 ms a request on a kept connection).
    disable_nagle_algorithm = True

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
        auth = self.headers.get("Authorization", "")
        ctype = self.headers.get("Content-Type", "")
        state.requests.append(Recorded(method, split.path, query, body, ctype, bearer(auth)))
        try:
            if not state.authorized(auth):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            code, payload = state.handle(method, split.path, query, body, ctype)
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

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")
