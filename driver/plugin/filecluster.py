"""FileCluster: the Cluster interface over a directory, so separate processes can share one fake cluster.

`carve plugin --cluster file:<dir>` reads ResourceClaims from `<dir>/resourceclaims/<ns>/<name>.json`,
keeps its ResourceSlices in `<dir>/resourceslices/<name>.json`, and reads (and writes the status of)
its NodePartitioning in `<dir>/nodepartitionings/<node>.json` (FileObjects). The demo and the plugin's
process-level tests use it (a test writes claims, the plugin process reads them); resourceVersion
conflicts work as on a real server. Not for production.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from driver.cluster.base import (
    KIND_RESOURCE_CLAIM,
    KIND_RESOURCE_SLICE,
    RESOURCE_API_VERSION,
    AlreadyExists,
    Conflict,
    NotFound,
)
from driver.cluster.objects import name_selected, stored_new, stored_update
from driver.fsutil import remove_durable, write_atomic


class FileObjects:
    """ObjectApi (driver.cluster.base) over the same directory: `<dir>/<plural>/<name>.json`, with the
    write semantics of driver/cluster/objects.py; a watch polls the files (and tombstones of deleted ones)
    for resourceVersions newer than the one given. Mixed into FileCluster."""

    root: Path
    _locked: Any
    _next_rv: Any

    def _object_path(self, plural: str, name: str) -> Path:
        return self.root / plural / f"{name}.json"

    def _read_dir(self, plural: str, tombstones: bool = False) -> list[dict[str, Any]]:
        where = self.root / (f".deleted-{plural}" if tombstones else plural)
        out = []
        for path in sorted(where.glob("*.json")) if where.exists() else []:
            with contextlib.suppress(FileNotFoundError, ValueError):
                out.append(json.loads(path.read_text()))
        return out

    def list_objects(self, plural: str, field_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        with self._locked():
            rv_path = self.root / ".resourceVersion"
            rv = rv_path.read_text() if rv_path.exists() else "0"
            return [o for o in self._read_dir(plural) if name_selected(o, field_selector)], rv

    def watch_objects(
        self, plural: str, resource_version: str, timeout_s: int, field_selector: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        since = int(resource_version or 0)
        deadline = time.monotonic() + timeout_s
        while True:
            found = [("MODIFIED", o) for o in self._read_dir(plural)]
            found += [("DELETED", o) for o in self._read_dir(plural, tombstones=True)]
            newer = sorted(
                (
                    (int(o["metadata"]["resourceVersion"]), k, o)
                    for k, o in found
                    if int(o["metadata"]["resourceVersion"]) > since and name_selected(o, field_selector)
                ),
                key=lambda e: e[0],
            )
            if newer or time.monotonic() >= deadline:
                for _, kind, obj in newer:
                    yield kind, obj
                return
            time.sleep(0.1)

    def get_object(self, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
        try:
            return json.loads(self._object_path(plural, name).read_text())
        except FileNotFoundError:
            raise NotFound(f"{plural} {name!r} not found", plural, name, namespace, 404) from None

    def create_object(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        path = self._object_path(plural, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            if path.exists():
                raise AlreadyExists(f"{plural} {name!r} already exists", plural, name, status=409)
            stored = stored_new(plural, obj, self._next_rv())
            write_atomic(path, json.dumps(stored).encode())
        return stored

    def update_object(self, plural: str, obj: dict[str, Any], status: bool = False) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        with self._locked():
            old = self.get_object(plural, name)
            stored = stored_update(plural, old, obj, status, self._next_rv())
            write_atomic(self._object_path(plural, name), json.dumps(stored).encode())
        return stored

    def delete_object(self, plural: str, name: str) -> None:
        with self._locked():
            old = self.get_object(plural, name)
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": self._next_rv()}}
            tomb = self.root / f".deleted-{plural}" / f"{name}.json"
            tomb.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(tomb, json.dumps(gone).encode())
            remove_durable(self._object_path(plural, name))


class FileCluster(FileObjects):
    def __init__(self, root: Path, version: tuple[int, int] = (1, 34)):
        self.root = Path(root)
        self.version = version
        (self.root / "resourceclaims").mkdir(parents=True, exist_ok=True)
        (self.root / "resourceslices").mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _next_rv(self) -> str:
        path = self.root / ".resourceVersion"
        rv = int(path.read_text()) + 1 if path.exists() else 1
        path.write_text(str(rv))
        return str(rv)

    # -- ResourceClaims -------------------------------------------------------------------------------

    def _claim_path(self, namespace: str, name: str) -> Path:
        return self.root / "resourceclaims" / namespace / f"{name}.json"

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return json.loads(self._claim_path(namespace, name).read_text())
        except FileNotFoundError:
            raise NotFound(
                f"resourceclaims {namespace}/{name} not found", KIND_RESOURCE_CLAIM, name, namespace, 404
            ) from None

    def put_resource_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        obj.update(apiVersion=RESOURCE_API_VERSION, kind=KIND_RESOURCE_CLAIM)
        path = self._claim_path(meta["namespace"], meta["name"])
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            meta["resourceVersion"] = self._next_rv()
            write_atomic(path, json.dumps(obj).encode())
        return obj

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        if not remove_durable(self._claim_path(namespace, name)):
            raise NotFound(
                f"resourceclaims {namespace}/{name} not found", KIND_RESOURCE_CLAIM, name, namespace, 404
            )

    def update_resource_claim_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace the status of a claim; Conflict on a stale resourceVersion."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name", "")
        with self._locked():
            old = self.get_resource_claim(namespace, name)
            want = meta.get("resourceVersion")
            if want and want != old["metadata"].get("resourceVersion"):
                raise Conflict(
                    f"resourceclaims {namespace}/{name}: resourceVersion {want} is stale",
                    KIND_RESOURCE_CLAIM,
                    name,
                    namespace,
                    409,
                )
            stored = {**old, "status": copy.deepcopy(obj.get("status") or {})}
            stored["metadata"] = {**old["metadata"], "resourceVersion": self._next_rv()}
            write_atomic(self._claim_path(namespace, name), json.dumps(stored).encode())
        return stored

    def put_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        (self.root / "namespaces").mkdir(exist_ok=True)
        body = {"metadata": {"name": name, "labels": dict(labels or {})}}
        write_atomic(self.root / "namespaces" / f"{name}.json", json.dumps(body).encode())

    def get_namespace(self, name: str) -> dict[str, Any]:
        try:
            return json.loads((self.root / "namespaces" / f"{name}.json").read_text())
        except FileNotFoundError:
            raise NotFound(f"namespaces {name} not found", "Namespace", name, "", 404) from None

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        """Events go to <root>/events/<namespace>.<uuid>.json (what `kubectl get events` would list)."""
        (self.root / "events").mkdir(exist_ok=True)
        stored = {**copy.deepcopy(body), "metadata": {**body.get("metadata", {}), "namespace": namespace}}
        write_atomic(self.root / "events" / f"{namespace}.{uuid.uuid4()}.json", json.dumps(stored).encode())

    # -- ResourceSlices -------------------------------------------------------------------------------

    def _slice_path(self, name: str) -> Path:
        return self.root / "resourceslices" / f"{name}.json"

    def list_resource_slices(self, driver: str, node_name: str | None = None) -> list[dict[str, Any]]:
        out = []
        for path in sorted((self.root / "resourceslices").glob("*.json")):
            with contextlib.suppress(FileNotFoundError):
                obj = json.loads(path.read_text())
                spec = obj.get("spec", {})
                if spec.get("driver") == driver and (node_name is None or spec.get("nodeName") == node_name):
                    out.append(obj)
        return out

    def get_resource_slice(self, name: str) -> dict[str, Any]:
        try:
            return json.loads(self._slice_path(name).read_text())
        except FileNotFoundError:
            raise NotFound(
                f"resourceslices {name!r} not found", KIND_RESOURCE_SLICE, name, status=404
            ) from None

    def create_resource_slice(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        if dry_run:  # this fake cluster has every gate on: it would store the object as it is
            return copy.deepcopy(obj)
        name = obj["metadata"]["name"]
        with self._locked():
            if self._slice_path(name).exists():
                raise AlreadyExists(
                    f"resourceslices {name!r} already exists", KIND_RESOURCE_SLICE, name, status=409
                )
            stored = {
                **obj,
                "apiVersion": RESOURCE_API_VERSION,
                "kind": KIND_RESOURCE_SLICE,
                "metadata": {**obj["metadata"], "uid": str(uuid.uuid4()), "resourceVersion": self._next_rv()},
            }
            write_atomic(self._slice_path(name), json.dumps(stored).encode())
        return stored

    def update_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        with self._locked():
            old = self.get_resource_slice(name)
            want = obj["metadata"].get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise Conflict(
                    f"resourceslices {name!r}: resourceVersion {want} is stale",
                    KIND_RESOURCE_SLICE,
                    name,
                    status=409,
                )
            stored = {
                **obj,
                "apiVersion": RESOURCE_API_VERSION,
                "kind": KIND_RESOURCE_SLICE,
                "metadata": {
                    **obj["metadata"],
                    "uid": old["metadata"]["uid"],
                    "resourceVersion": self._next_rv(),
                },
            }
            write_atomic(self._slice_path(name), json.dumps(stored).encode())
        return stored

    def delete_resource_slice(self, name: str) -> None:
        if not remove_durable(self._slice_path(name)):
            raise NotFound(f"resourceslices {name!r} not found", KIND_RESOURCE_SLICE, name, status=404)

    def server_version(self) -> tuple[int, int]:
        return self.version
