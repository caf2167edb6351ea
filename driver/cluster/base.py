"""The API-server surface carve uses, as one small interface, and the errors it raises.

Objects cross this interface as plain dicts in the resource.k8s.io/v1 JSON shape (camelCase keys, as
`kubectl get -o json` prints them), so the code that builds or reads them stays pure and is tested
without a client. Two implementations: `KubeCluster` (kube.py, the `kubernetes` client) and
`LocalCluster` (local.py, in memory, for unit tests, the demo and the simulator).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

RESOURCE_API_VERSION = "resource.k8s.io/v1"
KIND_RESOURCE_SLICE = "ResourceSlice"
KIND_RESOURCE_CLAIM = "ResourceClaim"


class ClusterError(Exception):
    """A failed API call. Carries the object's kind, name (and namespace) and the HTTP status, if any."""

    def __init__(
        self, message: str, kind: str = "", name: str = "", namespace: str = "", status: int | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.status = status

    @property
    def ref(self) -> str:
        """`ResourceClaim ns/name` or `ResourceSlice name`."""
        obj = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {obj}".strip()


class NotFound(ClusterError):
    """The object does not exist (HTTP 404)."""


class Conflict(ClusterError):
    """The write lost a race: stale resourceVersion on update (HTTP 409). Re-read and retry."""


class AlreadyExists(Conflict):
    """Create of a name that is taken (HTTP 409, reason AlreadyExists)."""


class Expired(ClusterError):
    """A watch from a resourceVersion the server no longer has (HTTP 410): list again."""


# The kinds the controller (and the plugin's partitioning) list, watch or write through `ObjectApi`:
# plural -> (apiVersion, kind, namespaced).
OBJECT_KINDS: dict[str, tuple[str, str, bool]] = {
    "resourceclaims": ("resource.k8s.io/v1", "ResourceClaim", True),
    "resourceslices": ("resource.k8s.io/v1", "ResourceSlice", False),
    "deviceclasses": ("resource.k8s.io/v1", "DeviceClass", False),
    "nodepartitionings": ("carve.dev/v1alpha1", "NodePartitioning", False),
    "partitioningpolicies": ("carve.dev/v1alpha1", "PartitioningPolicy", False),
    "nodes": ("v1", "Node", False),
    "namespaces": ("v1", "Namespace", False),
    "leases": ("coordination.k8s.io/v1", "Lease", True),
    "events": ("v1", "Event", True),
}


@runtime_checkable
class Cluster(Protocol):
    """What carve needs from the API server. All objects are dicts in the resource.k8s.io/v1 shape."""

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim, status included. Raises NotFound."""
        ...

    def list_resource_slices(self, driver: str, node_name: str | None = None) -> list[dict[str, Any]]:
        """Slices of `driver` (on `node_name`, when given), sorted by name."""
        ...

    def get_resource_slice(self, name: str) -> dict[str, Any]:
        """One slice. Raises NotFound."""
        ...

    def create_resource_slice(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Create; `metadata.name` or `metadata.generateName` names it. Returns the stored object (with
        resourceVersion and uid, minus any field the server dropped). Raises AlreadyExists.
        `dry_run`: the server admits the object (drops disabled fields, validates) but stores nothing."""
        ...

    def update_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace the slice named `metadata.name`. With `metadata.resourceVersion` set, the write only
        succeeds if it is still current, else Conflict; without it the update is unconditional.
        Raises NotFound."""
        ...

    def delete_resource_slice(self, name: str) -> None:
        """Delete. Raises NotFound when it is already gone."""
        ...

    def server_version(self) -> tuple[int, int]:
        """(major, minor) of the API server, e.g. (1, 34)."""
        ...


@runtime_checkable
class ObjectApi(Protocol):
    """Listing, watching and writing objects of the kinds in OBJECT_KINDS (dicts in their JSON shape)."""

    def list_objects(self, plural: str, field_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        """Every object (all namespaces; `metadata.name=<n>` selects one) and the list's resourceVersion."""
        ...

    def watch_objects(self, plural: str, resource_version: str, timeout_s: int,
                      field_selector: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
        """(ADDED|MODIFIED|DELETED, object) after `resource_version`, until the server ends the watch
        (at most `timeout_s`). Raises Expired when that version is gone."""
        ...

    def get_object(self, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
        ...

    def create_object(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        ...

    def update_object(self, plural: str, obj: dict[str, Any], status: bool = False) -> dict[str, Any]:
        """Replace the object (its status subresource with status=True); Conflict on a stale
        metadata.resourceVersion."""
        ...
