"""ObjectStore: objects of any kind in memory, with the API server's write semantics and a watch log.

Used by LocalCluster and by the HTTP API stand-in of the tests for what the controller reads and
writes (NodePartitionings, PartitioningPolicies, DeviceClasses, Nodes, Namespaces, Leases, Events) and
for the watch log of every kind. Semantics kept: one resourceVersion counter shared with the owner
(`next_rv`), names unique per (kind, namespace), Conflict on a stale resourceVersion, `generation`
bumped when `spec` changes, a status subresource (a write of the object keeps the stored status; a
status write keeps the rest), reads return copies. A watch returns the events after a resourceVersion.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from driver.cluster.base import AlreadyExists, ClusterError, Conflict, NotFound

# Kinds whose status is a subresource (a write of the object does not change it, and vice versa).
STATUS_SUBRESOURCE = frozenset({"nodepartitionings"})
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stored_new(plural: str, obj: dict[str, Any], rv: str) -> dict[str, Any]:
    """What the server stores on create: server-owned metadata set, no status for a status subresource."""
    stored = copy.deepcopy(obj)
    if plural in STATUS_SUBRESOURCE:
        stored.pop("status", None)
    stored["metadata"] = {
        **(obj.get("metadata") or {}),
        "uid": str(uuid.uuid4()),
        "generation": 1,
        "creationTimestamp": now_rfc3339(),
        "resourceVersion": rv,
    }
    return stored


def stored_update(
    plural: str, old: dict[str, Any], obj: dict[str, Any], status: bool, rv: str
) -> dict[str, Any]:
    """What the server stores on a replace of `old` by `obj` (of its status only, with status=True).
    Raises Conflict when obj carries a resourceVersion that is not old's."""
    meta = obj.get("metadata") or {}
    want = meta.get("resourceVersion")
    if want and want != old["metadata"]["resourceVersion"]:
        name = old["metadata"].get("name", "")
        raise Conflict(
            f"{plural} {name!r}: the object has been modified (resourceVersion {want} is not the current "
            f"{old['metadata']['resourceVersion']})",
            plural,
            name,
            old["metadata"].get("namespace", ""),
            409,
        )
    if status:
        stored = {**copy.deepcopy(old), "status": copy.deepcopy(obj.get("status"))}
    else:
        stored = copy.deepcopy(obj)
        if plural in STATUS_SUBRESOURCE:
            stored.pop("status", None)
            if "status" in old:
                stored["status"] = copy.deepcopy(old["status"])
        stored["metadata"] = {**meta}
        for k in ("uid", "creationTimestamp", "generation"):
            stored["metadata"][k] = old["metadata"].get(k)
        if stored.get("spec") != old.get("spec"):
            stored["metadata"]["generation"] = int(old["metadata"].get("generation") or 1) + 1
    stored["metadata"]["resourceVersion"] = rv
    return stored


def name_selected(obj: dict[str, Any], field_selector: str) -> bool:
    """The one field selector carve's fakes serve: `metadata.name=<name>` (empty: everything)."""
    if not field_selector:
        return True
    key, _, value = field_selector.partition("=")
    if key != "metadata.name":
        raise ClusterError(
            f"field selector {field_selector!r}: only metadata.name=<name> is supported", status=400
        )
    return (obj.get("metadata") or {}).get("name") == value.lstrip("=")


class ObjectStore:
    def __init__(
        self,
        lock: threading.RLock | None = None,
        next_rv: Callable[[], str] | None = None,
        keep_events: int = 10_000,
    ) -> None:
        self._cond = threading.Condition(lock or threading.RLock())
        self._rv = 0
        self._next_rv = next_rv or self._own_rv
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, plural, type, object)
        self.keep_events = keep_events

    def _own_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    @property
    def lock(self) -> threading.Condition:
        return self._cond

    # ---- the watch log --------------------------------------------------------------------------------

    def log(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        """Record a change made by the owner (the object carries its new resourceVersion)."""
        with self._cond:
            rv = int(obj["metadata"]["resourceVersion"])
            self.events.append((rv, plural, kind, copy.deepcopy(obj)))
            del self.events[: max(0, len(self.events) - self.keep_events)]
            self._cond.notify_all()

    def oldest_rv(self) -> int:
        with self._cond:
            return self.events[0][0] if self.events else 0

    def watch(
        self, plural: str, since: int, timeout_s: float, field_selector: str = ""
    ) -> list[tuple[str, dict[str, Any]]]:
        """Events of `plural` after `since`; waits up to `timeout_s` for the first one."""
        with self._cond:
            found = self._since(plural, since, field_selector)
            if not found and timeout_s > 0:
                self._cond.wait_for(
                    lambda: bool(self._since(plural, since, field_selector)), timeout=timeout_s
                )
                found = self._since(plural, since, field_selector)
            return found

    def _since(self, plural: str, since: int, field_selector: str = "") -> list[tuple[str, dict[str, Any]]]:
        return [
            (k, copy.deepcopy(o))
            for rv, p, k, o in self.events
            if p == plural and rv > since and name_selected(o, field_selector)
        ]

    def current_rv(self) -> str:
        with self._cond:
            return str(max((e[0] for e in self.events), default=0))

    # ---- objects ----------------------------------------------------------------------------------------

    def list(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [
                copy.deepcopy(o)
                for (p, ns, _), o in sorted(self.objects.items())
                if p == plural and (namespace is None or ns == namespace)
            ]

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        with self._cond:
            try:
                return copy.deepcopy(self.objects[(plural, namespace, name)])
            except KeyError:
                raise NotFound(
                    f"{plural} {namespace + '/' if namespace else ''}{name} not found",
                    plural,
                    name,
                    namespace,
                    404,
                ) from None

    def create(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name") or ""
        if not name:
            raise ClusterError(f"{plural}: metadata.name is required", plural, status=422)
        with self._cond:
            if (plural, namespace, name) in self.objects:
                raise AlreadyExists(f"{plural} {name!r} already exists", plural, name, namespace, 409)
            stored = stored_new(plural, obj, self._next_rv())
            self.objects[(plural, namespace, name)] = stored
            self.log(plural, ADDED, stored)
            return copy.deepcopy(stored)

    def update(self, plural: str, obj: dict[str, Any], status: bool = False) -> dict[str, Any]:
        """Replace (or, with status=True, replace only the status of) the object `obj` names."""
        meta = obj.get("metadata") or {}
        key = (plural, meta.get("namespace") or "", meta.get("name") or "")
        with self._cond:
            old = self.objects.get(key)
            if old is None:
                raise NotFound(f"{plural} {key[2]!r} not found", plural, key[2], key[1], 404)
            stored = stored_update(plural, old, obj, status, self._next_rv())
            self.objects[key] = stored
            self.log(plural, MODIFIED, stored)
            return copy.deepcopy(stored)

    def delete(self, plural: str, namespace: str, name: str) -> None:
        with self._cond:
            old = self.objects.pop((plural, namespace, name), None)
            if old is None:
                raise NotFound(f"{plural} {name!r} not found", plural, name, namespace, 404)
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": self._next_rv()}}
            self.log(plural, DELETED, gone)

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite as-is (test and demo helper: Nodes, Namespaces, DeviceClasses, policies)."""
        meta = obj.get("metadata") or {}
        key = (plural, meta.get("namespace") or "", meta.get("name") or "")
        with self._cond:
            old = self.objects.get(key)
            stored = copy.deepcopy(obj)
            stored["metadata"] = {
                "uid": str(uuid.uuid4()),
                "generation": 1,
                "creationTimestamp": now_rfc3339(),
                **(old or {}).get("metadata", {}),
                **meta,
                "resourceVersion": self._next_rv(),
            }
            self.objects[key] = stored
            self.log(plural, MODIFIED if old else ADDED, stored)
            return copy.deepcopy(stored)
