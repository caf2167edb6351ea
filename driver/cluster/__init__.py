"""How carve talks to the API server: the `Cluster` interface, its errors, and two implementations.

`KubeCluster` (kube.py, kube_objects.py) uses the `kubernetes` client; `LocalCluster` (local.py) keeps
objects in memory (objects.py's ObjectStore for the kinds beyond claims and slices). informer.py keeps a
local copy of one kind by list + watch.
kube.py is imported lazily (`from driver.cluster.kube import KubeCluster`) so that pure code and tests
using LocalCluster do not pay for the kubernetes client import.
"""

from driver.cluster.base import (
    KIND_RESOURCE_CLAIM,
    KIND_RESOURCE_SLICE,
    OBJECT_KINDS,
    RESOURCE_API_VERSION,
    AlreadyExists,
    Cluster,
    ClusterError,
    Conflict,
    Expired,
    NotFound,
    ObjectApi,
)
from driver.cluster.gates import (
    ALPHA_GATES_1_34,
    GATED_FIELDS,
    drop_disabled_fields,
    fields_of_disabled_gates,
)
from driver.cluster.local import LocalCluster

__all__ = [
    "ALPHA_GATES_1_34",
    "GATED_FIELDS",
    "KIND_RESOURCE_CLAIM",
    "KIND_RESOURCE_SLICE",
    "OBJECT_KINDS",
    "RESOURCE_API_VERSION",
    "AlreadyExists",
    "Cluster",
    "ClusterError",
    "Conflict",
    "Expired",
    "LocalCluster",
    "NotFound",
    "ObjectApi",
    "drop_disabled_fields",
    "fields_of_disabled_gates",
]
