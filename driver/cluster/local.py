"""LocalCluster: an in-memory API server (unit tests, demo, simulator): ResourceClaims and ResourceSlices,
and through an ObjectStore (objects.py) the other kinds the controller lists, watches and writes.

It keeps the semantics carve relies on: every write bumps one cluster-wide resourceVersion, an update
with a stale resourceVersion fails with Conflict, names are unique, `generateName` works, reads return
copies, and (with `drop_fields`) fields of disabled feature gates vanish on write as on a real server.
Thread-safe: one lock around the store.
"""

from __future__ import annotations

import copy
import secrets
import threading
import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

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
from driver.cluster.gates import check_drop_fields, drop_disabled_fields
from driver.cluster.objects import ADDED, DELETED, MODIFIED, ObjectStore, name_selected

# The API server's generateName suffix alphabet (no vowels, no confusable digits).
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generated_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(5))


class LocalCluster:
    """In-memory Cluster. `drop_fields` emulates disabled gates (see driver.cluster.gates)."""

    def __init__(self, drop_fields: Iterable[str] = (), version: tuple[int, int] = (1, 34)) -> None:
        self.drop_fields = check_drop_fields(drop_fields)
        self.version = version
        self._lock = threading.RLock()
        self._rv = 0
        self._slices: dict[str, dict[str, Any]] = {}
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}
        # Every other kind, and the watch log of all kinds (claims and slices included).
        self.objects = ObjectStore(self._lock, self._next_rv)
        self.events: list[dict[str, Any]] = []  # core/v1 Events, in the order they were created
        self.namespaces: dict[str, dict[str, Any]] = {}  # core/v1 Namespaces (labels: admin access)

    # -- ResourceClaims -------------------------------------------------------------------------------

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            try:
                return copy.deepcopy(self._claims[(namespace, name)])
            except KeyError:
                raise NotFound(
                    f"resourceclaims {namespace}/{name} not found",
                    KIND_RESOURCE_CLAIM,
                    name,
                    namespace,
                    404,
                ) from None

    def put_resource_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite a claim as-is (status included), as the scheduler would leave it.

        Fills in apiVersion, kind, uid (kept from the previous version of the same claim) and a new
        resourceVersion. For tests and the demo; the plugin never writes claims.
        """
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name")
        if not name:
            raise ClusterError("put_resource_claim: metadata.name is required", KIND_RESOURCE_CLAIM)
        with self._lock:
            stored = self._stamp(obj, KIND_RESOURCE_CLAIM)
            stored["metadata"]["namespace"] = namespace
            old = self._claims.get((namespace, name))
            if not meta.get("uid"):
                stored["metadata"]["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
            self._claims[(namespace, name)] = stored
            self.objects.log("resourceclaims", MODIFIED if old else ADDED, stored)
            return copy.deepcopy(stored)

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        with self._lock:
            old = self._claims.pop((namespace, name), None)
            if old is None:
                raise NotFound(
                    f"resourceclaims {namespace}/{name} not found", KIND_RESOURCE_CLAIM, name, namespace, 404
                )
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": self._next_rv()}}
            self.objects.log("resourceclaims", DELETED, gone)

    def update_resource_claim_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace the status of a claim; Conflict on a stale resourceVersion, as the API server does."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name", "")
        with self._lock:
            old = self._claims.get((namespace, name))
            if old is None:
                raise NotFound(
                    f"resourceclaims {namespace}/{name} not found", KIND_RESOURCE_CLAIM, name, namespace, 404
                )
            want = meta.get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise Conflict(
                    f"resourceclaims {namespace}/{name}: resourceVersion {want} is stale",
                    KIND_RESOURCE_CLAIM,
                    name,
                    namespace,
                    409,
                )
            stored = copy.deepcopy(old)
            stored["status"] = copy.deepcopy(obj.get("status") or {})
            stored["metadata"]["resourceVersion"] = self._next_rv()
            self._claims[(namespace, name)] = stored
            self.objects.log("resourceclaims", MODIFIED, stored)
            return copy.deepcopy(stored)

    def put_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        with self._lock:
            self.namespaces[name] = {"metadata": {"name": name, "labels": dict(labels or {})}}

    def get_namespace(self, name: str) -> dict[str, Any]:
        with self._lock:
            try:
                return copy.deepcopy(self.namespaces[name])
            except KeyError:
                raise NotFound(f"namespaces {name} not found", "Namespace", name, "", 404) from None

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        with self._lock:
            stored = copy.deepcopy(body)
            stored.setdefault("metadata", {})["namespace"] = namespace
            self.events.append(stored)

    # -- ResourceSlices -------------------------------------------------------------------------------

    def list_resource_slices(self, driver: str, node_name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            found = [
                copy.deepcopy(s)
                for s in self._slices.values()
                if s["spec"].get("driver") == driver
                and (node_name is None or s["spec"].get("nodeName") == node_name)
            ]
        return sorted(found, key=lambda s: s["metadata"]["name"])

    def get_resource_slice(self, name: str) -> dict[str, Any]:
        with self._lock:
            try:
                return copy.deepcopy(self._slices[name])
            except KeyError:
                raise _slice_not_found(name) from None

    def create_resource_slice(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        with self._lock:
            name = meta.get("name") or ""
            if not name and meta.get("generateName"):
                name = generated_name(meta["generateName"])
                while name in self._slices:
                    name = generated_name(meta["generateName"])
            if not name:
                raise ClusterError(
                    "resourceslices: metadata.name or metadata.generateName is required",
                    KIND_RESOURCE_SLICE,
                    status=422,
                )
            if name in self._slices:
                raise AlreadyExists(
                    f"resourceslices {name!r} already exists", KIND_RESOURCE_SLICE, name, status=409
                )
            if dry_run:
                stored = drop_disabled_fields(obj, self.drop_fields)
                stored["metadata"] = {**stored.get("metadata", {}), "name": name}
                return stored
            stored = self._stamp(drop_disabled_fields(obj, self.drop_fields), KIND_RESOURCE_SLICE)
            stored["metadata"].update(name=name, uid=str(uuid.uuid4()), generation=1)
            stored["metadata"].setdefault("creationTimestamp", _now())
            self._slices[name] = stored
            self.objects.log("resourceslices", ADDED, stored)
            return copy.deepcopy(stored)

    def update_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        with self._lock:
            old = self._slices.get(name)
            if old is None:
                raise _slice_not_found(name)
            want = meta.get("resourceVersion")
            have = old["metadata"]["resourceVersion"]
            if want and want != have:
                raise Conflict(
                    f"resourceslices {name!r}: the object has been modified (resourceVersion {want} is "
                    f"not the current {have}); read it again and retry",
                    KIND_RESOURCE_SLICE,
                    name,
                    status=409,
                )
            new = drop_disabled_fields(obj, self.drop_fields)
            stored = self._stamp(new, KIND_RESOURCE_SLICE)
            # Identity fields belong to the server, whatever the client sent.
            for key in ("uid", "creationTimestamp"):
                stored["metadata"][key] = old["metadata"][key]
            changed = new.get("spec") != old.get("spec")
            stored["metadata"]["generation"] = old["metadata"]["generation"] + (1 if changed else 0)
            self._slices[name] = stored
            self.objects.log("resourceslices", MODIFIED, stored)
            return copy.deepcopy(stored)

    def delete_resource_slice(self, name: str) -> None:
        with self._lock:
            old = self._slices.pop(name, None)
            if old is None:
                raise _slice_not_found(name)
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": self._next_rv()}}
            self.objects.log("resourceslices", DELETED, gone)

    def server_version(self) -> tuple[int, int]:
        return self.version

    # -- internals ------------------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _stamp(self, obj: dict[str, Any], kind: str) -> dict[str, Any]:
        """Copy with apiVersion/kind set and the next resourceVersion; caller holds the lock."""
        stored = copy.deepcopy(obj)
        stored["apiVersion"] = RESOURCE_API_VERSION
        stored["kind"] = kind
        stored.setdefault("metadata", {})["resourceVersion"] = self._next_rv()
        stored.setdefault("spec", {})
        return stored

    # -- ObjectApi (driver.cluster.base) ----------------------------------------------------------------

    def list_objects(self, plural: str, field_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        with self._lock:
            if plural == "resourceclaims":
                items = [copy.deepcopy(c) for _, c in sorted(self._claims.items())]
            elif plural == "resourceslices":
                items = [copy.deepcopy(c) for _, c in sorted(self._slices.items())]
            else:
                items = self.objects.list(plural)
            return [i for i in items if name_selected(i, field_selector)], str(self._rv)

    def watch_objects(
        self, plural: str, resource_version: str, timeout_s: int, field_selector: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        since = int(resource_version or 0)
        if since < self.objects.oldest_rv() - 1:
            raise Expired(f"{plural}: resourceVersion {since} is too old", plural, status=410)
        yield from self.objects.watch(plural, since, timeout_s, field_selector)

    def get_object(self, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
        return self.objects.get(plural, namespace, name)

    def create_object(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.objects.create(plural, obj)

    def update_object(self, plural: str, obj: dict[str, Any], status: bool = False) -> dict[str, Any]:
        return self.objects.update(plural, obj, status)


def _slice_not_found(name: str) -> NotFound:
    return NotFound(f"resourceslices {name!r} not found", KIND_RESOURCE_SLICE, name, status=404)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
