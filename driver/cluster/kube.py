"""KubeCluster: the Cluster interface over the official `kubernetes` client (resource.k8s.io/v1).

Dicts go through the client's own models: a dict is turned into a model with `ApiClient.deserialize`
(the path the client uses for responses) and a model back into a dict with
`ApiClient.sanitize_for_serialization` (the path it uses for request bodies). So what reaches the API
server, and what carve reads back, is exactly what the client can express: a field it does not know is
dropped here too, and tests against the HTTP stand-in exercise the real serialization. The exceptions are
the claim read and the claim status write, which every prepare makes: they carry the server's JSON as it
is, through the client's REST layer (`KubeCluster._rest`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import pydantic
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from driver.cluster.base import (
    KIND_RESOURCE_CLAIM,
    KIND_RESOURCE_SLICE,
    RESOURCE_API_VERSION,
    AlreadyExists,
    ClusterError,
    Conflict,
    Expired,
    NotFound,
)
from driver.cluster.decode import MAX_DEPTH, DecodeError, decode_object
from driver.cluster.kube_objects import KubeObjects

FIELD_MANAGER = "carve"
SLICE_MODEL = "V1ResourceSlice"
CLAIM_MODEL = "ResourceV1ResourceClaim"
DEFAULT_KUBECONFIG = Path("~/.kube/config")
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
# How often the configuration loaders' refresh hook runs at most (PacedRefresh).
REFRESH_PERIOD_S = 1.0

T = TypeVar("T")


class ApiClient(client.ApiClient):
    """The client's ApiClient writing timestamps as the API server does (RFC 3339, `Z`, whole seconds
    unless there is a fraction), so dicts read through KubeCluster look like those of `kubectl -o json`."""

    def sanitize_for_serialization(self, obj: Any) -> Any:
        if isinstance(obj, datetime.datetime):
            return rfc3339(obj)
        return super().sanitize_for_serialization(obj)


def rfc3339(moment: datetime.datetime) -> str:
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
    text = moment.isoformat(timespec="microseconds" if moment.microsecond else "seconds")
    return text + "Z"


class PacedRefresh:
    """The configuration loaders' `refresh_api_key_hook`, run at most once per `period` seconds.

    Both loaders (kubeconfig and in-cluster) install a hook the client runs before every request; it
    re-applies the whole configuration, and setting the host re-reads the proxy settings from the
    environment (`getproxies()`: every environment variable, about a tenth of a claim read's CPU). The
    hook only renews a token that has expired, and the in-cluster loader re-reads its token file once a
    minute, so running it once a second renews a token at most a second later."""

    def __init__(self, hook: Callable[[Any], None], period: float = REFRESH_PERIOD_S, clock=time.monotonic):
        self.hook, self.period, self.clock = hook, period, clock
        self._lock = threading.Lock()
        self._last: float | None = None

    def __call__(self, configuration: Any) -> None:
        with self._lock:
            now = self.clock()
            if self._last is not None and now - self._last < self.period:
                return
            self.hook(configuration)
            self._last = now  # only once it ran: a hook that raised runs again at the next request
            # The loaders' hook re-applies the configuration, itself included: keep its new self and stay.
            if configuration.refresh_api_key_hook not in (self, None):
                self.hook = configuration.refresh_api_key_hook
                configuration.refresh_api_key_hook = self


def load_api_client(kubeconfig: str | Path | None = None, context: str | None = None) -> client.ApiClient:
    """Client configuration: the given kubeconfig; else in-cluster; else $KUBECONFIG or ~/.kube/config."""
    cfg = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=cfg)
        else:
            try:
                config.load_incluster_config(client_configuration=cfg)
            except config.ConfigException:
                config.load_kube_config(context=context, client_configuration=cfg)
    except (config.ConfigException, OSError) as e:
        where = kubeconfig or "in-cluster service account, $KUBECONFIG or ~/.kube/config"
        raise ClusterError(f"cannot load a Kubernetes client configuration from {where}: {e}") from None
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook = PacedRefresh(cfg.refresh_api_key_hook)
    return ApiClient(cfg)


class KubeCluster(KubeObjects):
    """Cluster (and ObjectApi, kube_objects.py) backed by a real (or stand-in) API server."""

    def __init__(self, api_client: client.ApiClient, request_timeout: float = 15.0) -> None:
        self.api_client = api_client
        self.resource = client.ResourceV1Api(api_client)
        self.core = client.CoreV1Api(api_client)  # Events, and namespaces (admin access)
        self.request_timeout = request_timeout

    @classmethod
    def from_config(
        cls, kubeconfig: str | Path | None = None, context: str | None = None, request_timeout: float = 15.0
    ) -> KubeCluster:
        return cls(load_api_client(kubeconfig, context), request_timeout)

    # -- conversions ----------------------------------------------------------------------------------

    def to_model(self, obj: dict[str, Any], model: str) -> Any:
        """dict -> client model; a dict the model cannot hold (wrong type, missing required field) is a
        ClusterError naming the object, raised before anything is sent."""
        try:
            return self.api_client.deserialize(json.dumps(obj), model, "application/json")
        except (pydantic.ValidationError, TypeError, ValueError) as e:
            kind = obj.get("kind") or model
            name = (obj.get("metadata") or {}).get("name", "")
            raise ClusterError(f"{kind} {name}: cannot be expressed as {model}: {e}", kind, name) from None

    def to_dict(self, model: Any) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(model)

    # -- Cluster --------------------------------------------------------------------------------------

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim as a dict; a claim nested past decode.MAX_DEPTH (a tenant's opaque parameters) is a
        ClusterError naming it and the field, so the plugin fails that claim alone.

        Read as the server's JSON, not through the client's model: the model's build and its walk back
        to a dict cost about 0.18 ms of CPU per claim (20x json.loads), on every prepare and every status
        report (docs/performance.md), and a model drops fields its client version does not know. It goes
        through the client's REST layer (`_rest`), not the generated method."""
        got = self._call(
            KIND_RESOURCE_CLAIM, name, namespace, lambda: self._rest("GET", claim_path(namespace, name))
        )
        where = f"{KIND_RESOURCE_CLAIM} {namespace}/{name}"
        try:
            claim = decode_object(got, where)  # not JSON, or nested past MAX_DEPTH: the claim named
        except DecodeError as e:
            raise ClusterError(str(e), KIND_RESOURCE_CLAIM, name, namespace) from None
        if not isinstance(claim, dict):
            raise ClusterError(
                f"{where}: the API server's answer is not an object", KIND_RESOURCE_CLAIM, name, namespace
            )
        return claim

    def list_resource_slices(self, driver: str, node_name: str | None = None) -> list[dict[str, Any]]:
        selector = f"spec.driver={driver}" + (f",spec.nodeName={node_name}" if node_name else "")
        got = self._call(
            KIND_RESOURCE_SLICE,
            "",
            "",
            lambda: self.resource.list_resource_slice(
                field_selector=selector, _request_timeout=self.request_timeout
            ),
        )
        items = [self.to_dict(item) for item in got.items or []]
        for item in items:
            # List items come without TypeMeta; give them the one a single GET returns.
            item.update(apiVersion=RESOURCE_API_VERSION, kind=KIND_RESOURCE_SLICE)
        return sorted(items, key=lambda s: s["metadata"]["name"])

    def get_resource_slice(self, name: str) -> dict[str, Any]:
        got = self._call(
            KIND_RESOURCE_SLICE,
            name,
            "",
            lambda: self.resource.read_resource_slice(name, _request_timeout=self.request_timeout),
        )
        return self.to_dict(got)

    def create_resource_slice(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        body = self.to_model(obj, SLICE_MODEL)
        meta = obj.get("metadata") or {}
        got = self._call(
            KIND_RESOURCE_SLICE,
            meta.get("name") or meta.get("generateName", ""),
            "",
            lambda: self.resource.create_resource_slice(
                body,
                field_manager=FIELD_MANAGER,
                _request_timeout=self.request_timeout,
                **({"dry_run": "All"} if dry_run else {}),
            ),
        )
        return self.to_dict(got)

    def update_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        body = self.to_model(obj, SLICE_MODEL)
        name = (obj.get("metadata") or {}).get("name") or ""
        if not name:
            raise ClusterError("update: metadata.name is required", KIND_RESOURCE_SLICE)
        got = self._call(
            KIND_RESOURCE_SLICE,
            name,
            "",
            lambda: self.resource.replace_resource_slice(
                name, body, field_manager=FIELD_MANAGER, _request_timeout=self.request_timeout
            ),
        )
        return self.to_dict(got)

    def delete_resource_slice(self, name: str) -> None:
        self._call(
            KIND_RESOURCE_SLICE,
            name,
            "",
            lambda: self.resource.delete_resource_slice(name, _request_timeout=self.request_timeout),
        )

    def update_resource_claim_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a claim's status subresource (status.devices, driver/plugin/claims/status.py); Conflict
        on a stale metadata.resourceVersion. The body goes as JSON: a client model would drop fields it
        does not know (status.devices[].data). Through the client's REST layer, as the claim read."""
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name", ""), meta.get("namespace", "")
        path = claim_path(namespace, name) + "/status"
        return json.loads(
            self._call(KIND_RESOURCE_CLAIM, name, namespace, lambda: self._rest("PUT", path, obj))
        )

    def get_namespace(self, name: str) -> dict[str, Any]:
        got = self._call(
            "Namespace",
            name,
            "",
            lambda: self.core.read_namespace(name, _request_timeout=self.request_timeout),
        )
        return self.to_dict(got)

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        """Record a core/v1 Event (plugin/enforcement/enforcer.py: a claim the limiter does not hold)."""
        name = (body.get("metadata") or {}).get("generateName", "")
        self._call(
            "Event",
            name,
            namespace,
            lambda: self.core.create_namespaced_event(namespace, body, _request_timeout=self.request_timeout),
        )

    def server_version(self) -> tuple[int, int]:
        info = self._call(
            "Version",
            "",
            "",
            lambda: client.VersionApi(self.api_client).get_code(_request_timeout=self.request_timeout),
        )
        return parse_version(info.major, info.minor)

    # -- errors ---------------------------------------------------------------------------------------

    def _rest(self, method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
        """One request through the client's REST layer (its pool, TLS, timeouts and read retries) with the
        headers and authentication the generated methods send, returning the body; ApiException on any
        status but 200 OK (the two calls' success), as the generated methods raise it for an error.

        The two calls every prepare and status report makes go this way: the generated methods validate
        their arguments with pydantic and walk the body and headers through `sanitize_for_serialization`,
        about 40% of a claim read's client CPU (docs/performance.md, fifth pass)."""
        api = self.api_client
        headers = dict(api.default_headers)  # the User-Agent, and any the caller configured
        headers["Accept"] = "application/json"
        if body is not None:
            headers["Content-Type"] = "application/json"
        api.update_params_for_auth(headers, [], ["BearerToken"], path, method, None)
        response = api.rest_client.request(
            method,
            api.configuration.host + path,
            headers=headers,
            body=body,
            _request_timeout=self.request_timeout,
        )
        data = response.read()
        if response.status != 200:  # what the API server answers a read and a replace; the rest is an error
            raise ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace"), data=None
            )
        return data

    def _call(self, kind: str, name: str, namespace: str, fn: Callable[[], T]) -> T:
        """Run one API call, turning client errors into ClusterError / NotFound / Conflict."""
        try:
            return fn()
        except ApiException as e:
            raise _from_api_exception(e, kind, name, namespace) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            target = f"{kind} {namespace + '/' if namespace else ''}{name}".strip()
            raise ClusterError(f"{target}: API server unreachable: {e}", kind, name, namespace) from None
        except pydantic.ValidationError as e:  # the client's model refuses what the server sent
            target = f"{kind} {namespace + '/' if namespace else ''}{name}".strip()
            first = str(e).strip().splitlines()
            detail = " ".join(first[:3])
            raise ClusterError(f"{target}: cannot be read: {detail}", kind, name, namespace) from None
        except RecursionError:  # the client's decoder (or its models) recursing through a deep object
            target = f"{kind} {namespace + '/' if namespace else ''}{name}".strip()
            raise ClusterError(
                f"{target}: nested deeper than the decoder follows (carve reads at most {MAX_DEPTH} levels)",
                kind,
                name,
                namespace,
            ) from None


def claim_path(namespace: str, name: str) -> str:
    """A ResourceClaim's URL path, each name quoted as the client quotes path parameters."""
    return CLAIMS_PATH.format(namespace=quote(namespace, safe=""), name=quote(name, safe=""))


def parse_version(major: str, minor: str) -> tuple[int, int]:
    """("1", "34+") -> (1, 34); providers append +, -gke.N and the like to the minor."""
    found = [re.match(r"\d+", part or "") for part in (major, minor)]
    if not all(found):
        raise ClusterError(f"unparsable server version major={major!r} minor={minor!r}", "Version")
    return int(found[0].group()), int(found[1].group())


def _from_api_exception(e: ApiException, kind: str, name: str, namespace: str) -> ClusterError:
    status_obj: dict[str, Any] = {}
    with contextlib.suppress(TypeError, ValueError):
        status_obj = json.loads(e.body or "")
    if not isinstance(status_obj, dict):
        status_obj = {}
    # For a generateName create the server knows the name; prefer it to ours.
    name = (status_obj.get("details") or {}).get("name") or name
    reason = status_obj.get("reason") or e.reason or ""
    detail = status_obj.get("message") or (e.body or "").strip() or str(e.reason)
    target = f"{kind} {namespace + '/' if namespace else ''}{name}".strip()
    message = f"{target}: {e.status} {reason}: {detail}"
    if e.status == 404:
        return NotFound(message, kind, name, namespace, 404)
    if e.status == 410:
        return Expired(message, kind, name, namespace, 410)
    if e.status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(message, kind, name, namespace, 409)
    return ClusterError(message, kind, name, namespace, e.status)
