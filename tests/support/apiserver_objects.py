"""The state of the API stand-in (apiserver_standin.py): every object it serves, addressed by API path, and
the one watch log. Split out only to keep each file to one job and a readable length.

`ApiObjects` is driver/cluster/objects.py's ObjectStore (the API server's write semantics: names unique per
kind and namespace, Conflict on a stale resourceVersion, `generation`, the status subresource) plus what an
HTTP server needs on top: `locate(path)` turns an API path into (resource, namespace, name, subresource),
lists and watches filter by namespace, field selector and label selector, and `compact()` forgets the
watch log the way etcd compaction does, so a watch from before it gets 410 Expired.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from driver.cluster.objects import ObjectStore


@dataclass(frozen=True)
class Resource:
    prefix: str  # "api/v1" or "apis/<group>/<version>"
    api_version: str
    kind: str
    namespaced: bool
    fields: tuple[str, ...] = ()  # field selectors beyond metadata.name and metadata.namespace


RESOURCES = {
    "pods": Resource("api/v1", "v1", "Pod", True, ("spec.nodeName",)),
    "configmaps": Resource("api/v1", "v1", "ConfigMap", True),
    "events": Resource("api/v1", "v1", "Event", True),
    "nodes": Resource("api/v1", "v1", "Node", False),
    "namespaces": Resource("api/v1", "v1", "Namespace", False),
    "leases": Resource("apis/coordination.k8s.io/v1", "coordination.k8s.io/v1", "Lease", True),
    "resourceclaims": Resource("apis/resource.k8s.io/v1", "resource.k8s.io/v1", "ResourceClaim", True),
    "resourceslices": Resource(
        "apis/resource.k8s.io/v1",
        "resource.k8s.io/v1",
        "ResourceSlice",
        False,
        ("spec.nodeName", "spec.driver", "spec.pool.name"),
    ),
    "deviceclasses": Resource("apis/resource.k8s.io/v1", "resource.k8s.io/v1", "DeviceClass", False),
    "nodepartitionings": Resource("apis/carve.dev/v1alpha1", "carve.dev/v1alpha1", "NodePartitioning", False),
    "partitioningpolicies": Resource(
        "apis/carve.dev/v1alpha1", "carve.dev/v1alpha1", "PartitioningPolicy", False
    ),
}


class ApiError(Exception):
    """An error the server answers with a `Status` object."""

    def __init__(self, code: int, reason: str, message: str, name: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.code, self.reason, self.name, self.kind = code, reason, name, kind

    def status(self) -> dict[str, Any]:
        details: dict[str, str] = {}
        if self.kind:  # the resource (plural), as the real server names it in `details`
            group = RESOURCES[self.kind].api_version.rpartition("/")[0] if self.kind in RESOURCES else ""
            details = {"name": self.name, "group": group, "kind": self.kind}
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


@dataclass(frozen=True)
class Location:
    """What an API path names: a collection (name ""), an object, or an object's subresource."""

    plural: str
    namespace: str  # "" for cluster-scoped kinds and for a collection across all namespaces
    name: str = ""
    sub: str = ""

    @property
    def resource(self) -> Resource:
        return RESOURCES[self.plural]

    @property
    def path(self) -> str:
        ns = f"/namespaces/{self.namespace}" if self.namespace else ""
        tail = "".join(f"/{p}" for p in (self.name, self.sub) if p)
        return f"/{self.resource.prefix}{ns}/{self.plural}{tail}"


def locate(path: str) -> Location | None:
    """/api/v1/namespaces/team/pods/p/binding -> Location(pods, team, p, binding); None if no kind served."""
    parts = [unquote(p) for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        prefix, rest = "api/v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        prefix, rest = "/".join(parts[:3]), parts[3:]
    else:
        return None
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3 or rest[0] not in RESOURCES:
        return None
    resource = RESOURCES[rest[0]]
    if resource.prefix != prefix or (namespace and not resource.namespaced):
        return None
    name, sub = [*rest[1:], "", ""][:2]
    if name and resource.namespaced and not namespace:
        return None  # a namespaced object is only reachable through its namespace
    return Location(rest[0], namespace, name, sub)


def parse_selector(text: str) -> list[tuple[str, str, str]]:
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


def _field(obj: dict[str, Any], dotted: str) -> str:
    value: Any = obj
    for key in dotted.split("."):
        value = (value or {}).get(key) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _holds(op: str, key: str, value: str, values: dict[str, str]) -> bool:
    if op == "exists":
        return key in values
    if op == "!exists":
        return key not in values
    return (values.get(key) == value) == (op == "=")


def selector(loc: Location, query: dict[str, list[str]]) -> Callable[[dict[str, Any]], bool]:
    """The objects of a list or watch of `loc`: its namespace, `fieldSelector` and `labelSelector`.
    A field the real server does not index for the kind is refused with 400, as it is there."""
    field_terms = parse_selector((query.get("fieldSelector") or [""])[0])
    label_terms = parse_selector((query.get("labelSelector") or [""])[0])
    known = ("metadata.name", "metadata.namespace", *loc.resource.fields)
    for key, op, _ in field_terms:
        if key not in known or op not in ("=", "!="):
            raise ApiError(
                400, "BadRequest", f'"{key}" is not a known field selector: only "{", ".join(known)}"'
            )

    def selected(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if loc.namespace and meta.get("namespace") != loc.namespace:
            return False
        fields = {k: _field(obj, k) for k, _, _ in field_terms}
        labels = meta.get("labels") or {}
        return all(_holds(op, k, v, fields) for k, op, v in field_terms) and all(
            _holds(op, k, v, labels) for k, op, v in label_terms
        )

    return selected


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class ApiObjects(ObjectStore):
    """Every object of the stand-in, with the one resourceVersion counter and the one watch log."""

    def __init__(self) -> None:
        self.rv = 0
        super().__init__(next_rv=self._bump)
        self.compacted_rv = 0  # watches from a version before this one get 410 Expired

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    # -- addressed by API path (test helpers) ---------------------------------------------------------

    def _key(self, path: str) -> Location:
        loc = locate(path)
        if loc is None or not loc.name or loc.sub:
            raise KeyError(f"{path}: not the path of an object this stand-in serves")
        return loc

    def __getitem__(self, path: str) -> dict[str, Any]:
        loc = self._key(path)
        return self.get(loc.plural, loc.namespace, loc.name)

    def put_path(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        loc = self._key(path)
        meta = {**(obj.get("metadata") or {}), "name": loc.name}
        if loc.namespace:
            meta["namespace"] = loc.namespace
        return self.put(loc.plural, {**obj, "metadata": meta})

    def delete_path(self, path: str) -> None:
        loc = self._key(path)
        self.delete(loc.plural, loc.namespace, loc.name)

    # -- list, watch, compaction ----------------------------------------------------------------------

    def list_at(self, loc: Location, query: dict[str, list[str]]) -> dict[str, Any]:
        selected = selector(loc, query)
        with self.lock:
            items = [o for o in self.list(loc.plural) if selected(o)]
            rv = str(self.rv)
        for item in items:  # like the real server, items of a list carry no TypeMeta
            item.pop("apiVersion", None)
            item.pop("kind", None)
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return {
            "apiVersion": loc.resource.api_version,
            "kind": f"{loc.resource.kind}List",
            "metadata": {"resourceVersion": rv},
            "items": items,
        }

    def compact(self) -> None:
        """Forget the watch log: a watch from any version up to now gets 410 (once a write follows, a
        list gives a version that can be watched again)."""
        with self.lock:
            self.events.clear()
            self.compacted_rv = self.rv + 1

    def _expired(self, since: int) -> bool:
        trimmed = since and self.events and since < self.events[0][0] - 1  # older than the kept log
        return since < self.compacted_rv or bool(trimmed)

    def watch_at(self, loc: Location, query: dict[str, list[str]], timeout_s: float) -> list[dict[str, Any]]:
        """The events after `resourceVersion` that `loc` and its selectors select, once there are any or
        `timeout_s` passed (the end of one watch request of the real server); a version older than the log
        gets an ERROR event carrying a 410 Expired Status, as the real server sends it."""
        selected = selector(loc, query)
        since = int((query.get("resourceVersion") or ["0"])[0] or 0)
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while True:
                if self._expired(since):
                    gone = ApiError(
                        410, "Expired", f"too old resource version: {since} ({self.compacted_rv})"
                    )
                    return [{"type": "ERROR", "object": gone.status()}]
                out = [
                    {"type": kind, "object": copy.deepcopy(obj)}
                    for rv, plural, kind, obj in self.events
                    if rv > since and plural == loc.plural and selected(obj)
                ]
                left = deadline - time.monotonic()
                if out or left <= 0:
                    return out
                self.lock.wait(left)
