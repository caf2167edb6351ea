"""FileCluster: the Cluster interface over a directory, so separate processes can share one fake cluster.

`carve plugin --cluster file:<dir>` reads ResourceClaims from `<dir>/resourceclaims/<ns>/<name>.json` and
keeps its ResourceSlices in `<dir>/resourceslices/<name>.json`. The demo and the plugin's process-level
tests use it (a test writes claims, the plugin process reads them); resourceVersion conflicts work as on
a real server. Not for production.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
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
from driver.fsutil import remove_durable, write_atomic


class FileCluster:
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
