"""The kubelet plugin's core/v1 Events: one builder, so every Event it writes has the shape the events
admission policy (helm/carve/templates/events-admission.yaml) allows: reported by this node (source.host,
reportingInstance), about a ResourceClaim or about this Node."""

from __future__ import annotations

import datetime
from typing import Any

from driver import names

MAX_MESSAGE = 1024


def plugin_event(
    node: str, involved: dict[str, Any], namespace: str, reason: str, message: str, type_: str = "Warning"
) -> dict[str, Any]:
    """An Event body about `involved` (its apiVersion, kind, name[, namespace], uid), from this node."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": type_,
        "source": {"component": "carve-kubelet-plugin", "host": node},
        "reportingComponent": f"{names.DRIVER_NAME}/kubelet-plugin",
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def node_event(node: str, reason: str, message: str, type_: str = "Warning") -> dict[str, Any]:
    """An Event about this Node, in `default` with the node's name as uid, as the kubelet writes its own
    (`kubectl describe node` finds them)."""
    involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}
    return plugin_event(node, involved, "default", reason, message, type_)


def claim_event(node: str, namespace: str, name: str, uid: str, reason: str, message: str) -> dict[str, Any]:
    """A Warning Event about a ResourceClaim, in the claim's namespace."""
    involved = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "name": name,
        "namespace": namespace,
        "uid": uid,
    }
    return plugin_event(node, involved, namespace, reason, message)
