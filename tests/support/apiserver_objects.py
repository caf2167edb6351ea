"""The controller's routes of the API stand-in (apiserver_standin.py): listing and watching the kinds it
watches, NodePartitioning writes (with the status subresource), Leases and Events, kept in an ObjectStore
(driver/cluster/objects.py). Split out only to keep each file to one job and a readable length."""

from __future__ import annotations

import copy
import secrets
from typing import Any

from driver.cluster.base import AlreadyExists, ClusterError, Conflict, NotFound
from driver.cluster.objects import name_selected

SLICES_PATH = ("apis", "resource.k8s.io", "v1", "resourceslices")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, name: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.code, self.reason, self.name, self.kind = code, reason, name, kind

    def status(self) -> dict[str, Any]:
        details = {"name": self.name, "group": "resource.k8s.io", "kind": self.kind} if self.kind else {}
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": str(self),
            "reason": self.reason,
            "details": details,
            "code": self.code,
        }


class _WatchStream(list):
    """Watch events, sent as newline-delimited JSON (the watch wire format) instead of one document."""


class ObjectRoutes:
    """Mixed into ApiServerStandIn, which provides `store` (lock, rv, claims) and `objects`."""

    store: Any
    objects: Any
    max_watch_s: float

    # -- the controller's kinds (ObjectStore) ---------------------------------------------------------

    _COLLECTIONS = {
        ("apis", "resource.k8s.io", "v1", "resourceclaims"): "resourceclaims",
        ("apis", "resource.k8s.io", "v1", "deviceclasses"): "deviceclasses",
        ("apis", "carve.dev", "v1alpha1", "nodepartitionings"): "nodepartitionings",
        ("apis", "carve.dev", "v1alpha1", "partitioningpolicies"): "partitioningpolicies",
        ("api", "v1", "nodes"): "nodes",
        ("api", "v1", "namespaces"): "namespaces",
    }

    def _handle_objects(
        self, method: str, parts: list[str], query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any] | None:
        """Routes of the controller's kinds; None for any other path."""
        try:
            return self._route_objects(method, parts, query, body)
        except NotFound as e:
            raise ApiError(404, "NotFound", str(e), e.name, e.kind) from None
        except AlreadyExists as e:
            raise ApiError(409, "AlreadyExists", str(e), e.name, e.kind) from None
        except Conflict as e:
            raise ApiError(409, "Conflict", str(e), e.name, e.kind) from None
        except ClusterError as e:
            raise ApiError(e.status or 422, "Invalid", str(e), e.name, e.kind) from None

    def _route_objects(
        self, method: str, parts: list[str], query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any] | None:
        key = tuple(parts)
        if method == "GET" and query.get("watch") in (["true"], ["1"]):
            plural = self._COLLECTIONS.get(key) or ("resourceslices" if key == SLICES_PATH else None)
            if plural:
                return 200, self._watch(plural, query)
        if method == "GET" and key in self._COLLECTIONS:
            return 200, self._list_objects(self._COLLECTIONS[key], (query.get("fieldSelector") or [""])[0])
        if parts[:3] == ["apis", "carve.dev", "v1alpha1"] and len(parts) >= 4:
            plural = parts[3]
            if plural not in ("nodepartitionings", "partitioningpolicies"):
                return None
            if len(parts) == 4 and method == "POST":
                return 201, self.objects.create(plural, self._body(body, "carve.dev/v1alpha1"))
            if len(parts) == 5 and method == "GET":
                return 200, self.objects.get(plural, "", parts[4])
            if len(parts) in (5, 6) and method == "PUT" and parts[5:] in ([], ["status"]):
                obj = self._body(body, "carve.dev/v1alpha1")
                if obj["metadata"].get("name") != parts[4]:
                    raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
                return 200, self.objects.update(plural, obj, status=parts[5:] == ["status"])
        if (
            parts[:4] == ["apis", "coordination.k8s.io", "v1", "namespaces"]
            and len(parts) >= 6
            and parts[5] == "leases"
        ):
            ns = parts[4]
            if len(parts) == 6 and method == "POST":
                obj = self._body(body, "coordination.k8s.io/v1")
                obj["metadata"]["namespace"] = ns
                return 201, self.objects.create("leases", obj)
            if len(parts) == 7 and method == "GET":
                return 200, self.objects.get("leases", ns, parts[6])
            if len(parts) == 7 and method == "PUT":
                obj = self._body(body, "coordination.k8s.io/v1")
                obj["metadata"]["namespace"] = ns
                return 200, self.objects.update("leases", obj)
        if (
            parts[:3] == ["api", "v1", "namespaces"]
            and len(parts) == 5
            and parts[4] == "events"
            and method == "POST"
        ):
            obj = self._body(body, "v1")
            meta = obj["metadata"]
            meta["namespace"] = parts[3]
            if not meta.get("name"):
                meta["name"] = meta.get("generateName", "event.") + secrets.token_hex(4)
            return 201, self.objects.create("events", obj)
        return None

    @staticmethod
    def _body(body: Any, api_version: str) -> dict[str, Any]:
        if not isinstance(body, dict) or body.get("apiVersion") != api_version:
            raise ApiError(400, "BadRequest", f"expected a {api_version} object")
        obj = copy.deepcopy(body)
        obj.setdefault("metadata", {})
        return obj

    def _list_objects(self, plural: str, field_selector: str = "") -> dict[str, Any]:
        with self.store.lock:
            if plural == "resourceclaims":
                items = [copy.deepcopy(c) for _, c in sorted(self.store.claims.items())]
            else:
                items = self.objects.list(plural)
            items = [i for i in items if name_selected(i, field_selector)]
            for item in items:  # list items carry no TypeMeta
                item.pop("apiVersion", None)
                item.pop("kind", None)
            return {
                "kind": "List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": items,
            }

    def _watch(self, plural: str, query: dict[str, list[str]]) -> _WatchStream:
        since = int((query.get("resourceVersion") or ["0"])[0] or 0)
        if since and since < self.objects.oldest_rv() - 1:
            raise ApiError(410, "Expired", f"too old resource version: {since}")
        timeout = min(float((query.get("timeoutSeconds") or ["30"])[0]), self.max_watch_s)
        events = self.objects.watch(plural, since, timeout, (query.get("fieldSelector") or [""])[0])
        return _WatchStream([{"type": kind, "object": obj} for kind, obj in events])
