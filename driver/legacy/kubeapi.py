"""The API-server calls the legacy shim makes, as one small interface with two implementations.

`KubeLegacyApi` uses the official client (CoreV1Api, CoordinationV1Api); `MemoryLegacyApi` keeps the same
objects in memory for tests and benchmarks, with resourceVersion checks and create conflicts, so the
extender's and device plugin's code paths are the production ones. Objects are plain dicts (k8s JSON).
Errors are driver.cluster's ClusterError / NotFound / Conflict / AlreadyExists. The helm chart's RBAC grants
exactly these calls (helm/carve/templates/legacy-rbac.yaml).
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from driver.cluster.base import AlreadyExists, ClusterError, Conflict, NotFound

# The client's default patch type is JSON Patch (a list of operations); our bodies are merge patches.
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Source:
    """A collection the extender follows by list+watch: `pods` (scheduled, all namespaces), `nodes`, or
    `configmaps` of one namespace with a label selector."""

    resource: str
    namespace: str = ""
    label_selector: str = ""


class LegacyApi(Protocol):
    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...
    def list_pods(self, node: str = "") -> list[dict[str, Any]]: ...  # scheduled pods (on `node` if given)
    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None: ...
    def create_binding(self, namespace: str, name: str, uid: str, node: str) -> None: ...
    def get_node(self, name: str) -> dict[str, Any]: ...
    def list_nodes(self) -> list[dict[str, Any]]: ...
    def patch_node_annotations(self, name: str, annotations: dict[str, str]) -> None: ...
    def create_configmap(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def get_configmap(self, namespace: str, name: str) -> dict[str, Any]: ...
    def delete_configmap(self, namespace: str, name: str) -> None: ...
    def list_configmaps(self, namespace: str, label_selector: str) -> list[dict[str, Any]]: ...
    def get_lease(self, namespace: str, name: str) -> dict[str, Any]: ...
    def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]: ...


class MemoryLegacyApi:
    """In-memory API objects: pods, nodes, configmaps, leases. Thread-safe; returns copies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rv = itertools.count(1)
        self.pods: dict[tuple[str, str], dict] = {}
        self.nodes: dict[str, dict] = {}
        self.configmaps: dict[tuple[str, str], dict] = {}
        self.leases: dict[tuple[str, str], dict] = {}
        self.bindings: list[tuple[str, str, str, str]] = []
        self.fail_binding: set[str] = set()  # pod names whose Binding the "server" refuses

    def _stamp(self, obj: dict) -> dict:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        return obj

    # --- test helpers ---
    def add_pod(self, pod: dict) -> dict:
        with self._lock:
            meta = pod["metadata"]
            self.pods[(meta["namespace"], meta["name"])] = self._stamp(copy.deepcopy(pod))
            return copy.deepcopy(self.pods[(meta["namespace"], meta["name"])])

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self.pods.pop((namespace, name), None)

    def add_node(self, node: dict) -> None:
        with self._lock:
            self.nodes[node["metadata"]["name"]] = self._stamp(copy.deepcopy(node))

    # --- pods ---
    def get_pod(self, namespace: str, name: str) -> dict:
        with self._lock:
            if (namespace, name) not in self.pods:
                raise NotFound(f"Pod {namespace}/{name}: 404 NotFound", "Pod", name, namespace, 404)
            return copy.deepcopy(self.pods[(namespace, name)])

    def list_pods(self, node: str = "") -> list[dict]:
        with self._lock:
            return [
                copy.deepcopy(p)
                for p in self.pods.values()
                if (p.get("spec") or {}).get("nodeName") and (not node or p["spec"]["nodeName"] == node)
            ]

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                raise NotFound(f"Pod {namespace}/{name}: 404 NotFound", "Pod", name, namespace, 404)
            pod["metadata"].setdefault("annotations", {}).update(annotations)
            self._stamp(pod)

    def create_binding(self, namespace: str, name: str, uid: str, node: str) -> None:
        with self._lock:
            pod = self.pods.get((namespace, name))
            if pod is None or name in self.fail_binding:
                raise NotFound(f"Pod {namespace}/{name}: 404 NotFound", "Pod", name, namespace, 404)
            if pod["metadata"].get("uid") != uid:
                raise Conflict(
                    f"Pod {namespace}/{name}: 409 Conflict: uid precondition", "Pod", name, namespace, 409
                )
            if pod.setdefault("spec", {}).get("nodeName"):
                raise Conflict(
                    f"Pod {namespace}/{name}: 409 Conflict: already assigned", "Pod", name, namespace, 409
                )
            pod["spec"]["nodeName"] = node
            self._stamp(pod)
            self.bindings.append((namespace, name, uid, node))

    # --- nodes ---
    def get_node(self, name: str) -> dict:
        with self._lock:
            if name not in self.nodes:
                raise NotFound(f"Node {name}: 404 NotFound", "Node", name, "", 404)
            return copy.deepcopy(self.nodes[name])

    def list_nodes(self) -> list[dict]:
        with self._lock:
            return [copy.deepcopy(n) for n in self.nodes.values()]

    def patch_node_annotations(self, name: str, annotations: dict[str, str]) -> None:
        with self._lock:
            node = self.nodes.setdefault(name, {"metadata": {"name": name}})
            node["metadata"].setdefault("annotations", {}).update(annotations)
            self._stamp(node)

    # --- configmaps ---
    def create_configmap(self, obj: dict) -> dict:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._lock:
            if key in self.configmaps:
                raise AlreadyExists(
                    f"ConfigMap {key[0]}/{key[1]}: 409 AlreadyExists", "ConfigMap", key[1], key[0], 409
                )
            self.configmaps[key] = self._stamp(copy.deepcopy(obj))
            return copy.deepcopy(self.configmaps[key])

    def get_configmap(self, namespace: str, name: str) -> dict:
        with self._lock:
            if (namespace, name) not in self.configmaps:
                raise NotFound(
                    f"ConfigMap {namespace}/{name}: 404 NotFound", "ConfigMap", name, namespace, 404
                )
            return copy.deepcopy(self.configmaps[(namespace, name)])

    def delete_configmap(self, namespace: str, name: str) -> None:
        with self._lock:
            if self.configmaps.pop((namespace, name), None) is None:
                raise NotFound(
                    f"ConfigMap {namespace}/{name}: 404 NotFound", "ConfigMap", name, namespace, 404
                )

    def list_configmaps(self, namespace: str, label_selector: str) -> list[dict]:
        key, _, value = label_selector.partition("=")
        with self._lock:
            return [
                copy.deepcopy(c)
                for (ns, _n), c in self.configmaps.items()
                if ns == namespace and (c["metadata"].get("labels") or {}).get(key) == value
            ]

    # --- leases ---
    def get_lease(self, namespace: str, name: str) -> dict:
        with self._lock:
            if (namespace, name) not in self.leases:
                raise NotFound(f"Lease {namespace}/{name}: 404 NotFound", "Lease", name, namespace, 404)
            return copy.deepcopy(self.leases[(namespace, name)])

    def create_lease(self, obj: dict) -> dict:
        meta = obj["metadata"]
        with self._lock:
            if (meta["namespace"], meta["name"]) in self.leases:
                raise AlreadyExists("Lease: 409 AlreadyExists", "Lease", meta["name"], meta["namespace"], 409)
            self.leases[(meta["namespace"], meta["name"])] = self._stamp(copy.deepcopy(obj))
            return copy.deepcopy(self.leases[(meta["namespace"], meta["name"])])

    def update_lease(self, obj: dict) -> dict:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._lock:
            current = self.leases.get(key)
            if current is None:
                raise NotFound("Lease: 404 NotFound", "Lease", meta["name"], meta["namespace"], 404)
            if current["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
                raise Conflict("Lease: 409 Conflict", "Lease", meta["name"], meta["namespace"], 409)
            self.leases[key] = self._stamp(copy.deepcopy(obj))
            return copy.deepcopy(self.leases[key])


class KubeLegacyApi:
    """LegacyApi over the official client. Every call carries a timeout; errors become ClusterError."""

    def __init__(self, api_client, request_timeout: float = 10.0) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.client = client
        self.timeout = request_timeout

    def _call(self, kind: str, name: str, namespace: str, fn):
        from driver.cluster.kube import KubeCluster

        return KubeCluster._call(self, kind, name, namespace, fn)  # the one ApiException -> ClusterError map

    def _dict(self, model) -> dict:
        return self.api_client.sanitize_for_serialization(model)

    # --- list+watch (the extender's informers) ---
    def _lister(self, source: Source):
        if source.resource == "pods":
            return "Pod", self.core.list_pod_for_all_namespaces, {"field_selector": "spec.nodeName!="}
        if source.resource == "nodes":
            return "Node", self.core.list_node, {}
        if source.resource == "configmaps":
            kw = {"namespace": source.namespace, "label_selector": source.label_selector}
            return "ConfigMap", self.core.list_namespaced_config_map, kw
        raise ValueError(f"no list+watch for {source.resource!r}")

    def list_versioned(self, source: Source) -> tuple[list[dict], str]:
        """The collection and the resourceVersion to watch it from."""
        kind, fn, kw = self._lister(source)
        got = self._call(kind, "", source.namespace, lambda: fn(**kw, _request_timeout=self.timeout))
        return [self._dict(i) for i in got.items or []], (got.metadata.resource_version or "")

    def watch(self, source: Source, resource_version: str, timeout_s: int) -> Iterator[tuple[str, dict]]:
        """(type, object) events after `resource_version` until the server ends the watch (`timeout_s`).
        A ClusterError with status 410 means the version is too old: list again."""
        from kubernetes import watch

        kind, fn, kw = self._lister(source)
        stream = watch.Watch().stream(
            fn,
            resource_version=resource_version,
            timeout_seconds=int(timeout_s),
            allow_watch_bookmarks=True,
            _request_timeout=(self.timeout, timeout_s + self.timeout),
            **kw,
        )
        while True:
            ev = self._call(kind, "", source.namespace, lambda: next(stream, None))
            if ev is None:
                return
            yield ev["type"], ev["raw_object"]

    def get_pod(self, namespace: str, name: str) -> dict:
        got = self._call(
            "Pod",
            name,
            namespace,
            lambda: self.core.read_namespaced_pod(name, namespace, _request_timeout=self.timeout),
        )
        return self._dict(got)

    def list_pods(self, node: str = "") -> list[dict]:
        selector = f"spec.nodeName={node}" if node else "spec.nodeName!="
        got = self._call(
            "Pod",
            "",
            "",
            lambda: self.core.list_pod_for_all_namespaces(
                field_selector=selector, _request_timeout=self.timeout
            ),
        )
        return [self._dict(p) for p in got.items or []]

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        body = {"metadata": {"annotations": annotations}}
        self._call(
            "Pod",
            name,
            namespace,
            lambda: self.core.patch_namespaced_pod(
                name, namespace, body, _content_type=MERGE_PATCH, _request_timeout=self.timeout
            ),
        )

    def create_binding(self, namespace: str, name: str, uid: str, node: str) -> None:
        c = self.client
        body = c.V1Binding(
            metadata=c.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=c.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        # The client cannot decode the Status the server answers with; the HTTP status is what matters.
        self._call(
            "Binding",
            name,
            namespace,
            lambda: self.core.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=self.timeout
            ),
        )

    def get_node(self, name: str) -> dict:
        return self._dict(
            self._call("Node", name, "", lambda: self.core.read_node(name, _request_timeout=self.timeout))
        )

    def list_nodes(self) -> list[dict]:
        got = self._call("Node", "", "", lambda: self.core.list_node(_request_timeout=self.timeout))
        return [self._dict(n) for n in got.items or []]

    def patch_node_annotations(self, name: str, annotations: dict[str, str]) -> None:
        body = {"metadata": {"annotations": annotations}}
        self._call(
            "Node",
            name,
            "",
            lambda: self.core.patch_node(
                name, body, _content_type=MERGE_PATCH, _request_timeout=self.timeout
            ),
        )

    def create_configmap(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return self._dict(
            self._call(
                "ConfigMap",
                meta["name"],
                meta["namespace"],
                lambda: self.core.create_namespaced_config_map(
                    meta["namespace"], obj, _request_timeout=self.timeout
                ),
            )
        )

    def get_configmap(self, namespace: str, name: str) -> dict:
        return self._dict(
            self._call(
                "ConfigMap",
                name,
                namespace,
                lambda: self.core.read_namespaced_config_map(name, namespace, _request_timeout=self.timeout),
            )
        )

    def delete_configmap(self, namespace: str, name: str) -> None:
        self._call(
            "ConfigMap",
            name,
            namespace,
            lambda: self.core.delete_namespaced_config_map(name, namespace, _request_timeout=self.timeout),
        )

    def list_configmaps(self, namespace: str, label_selector: str) -> list[dict]:
        got = self._call(
            "ConfigMap",
            "",
            namespace,
            lambda: self.core.list_namespaced_config_map(
                namespace, label_selector=label_selector, _request_timeout=self.timeout
            ),
        )
        return [self._dict(c) for c in got.items or []]

    def get_lease(self, namespace: str, name: str) -> dict:
        return self._dict(
            self._call(
                "Lease",
                name,
                namespace,
                lambda: self.coordination.read_namespaced_lease(
                    name, namespace, _request_timeout=self.timeout
                ),
            )
        )

    def create_lease(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return self._dict(
            self._call(
                "Lease",
                meta["name"],
                meta["namespace"],
                lambda: self.coordination.create_namespaced_lease(
                    meta["namespace"], obj, _request_timeout=self.timeout
                ),
            )
        )

    def update_lease(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return self._dict(
            self._call(
                "Lease",
                meta["name"],
                meta["namespace"],
                lambda: self.coordination.replace_namespaced_lease(
                    meta["name"], meta["namespace"], obj, _request_timeout=self.timeout
                ),
            )
        )


__all__ = ["ClusterError", "KubeLegacyApi", "LegacyApi", "MemoryLegacyApi", "Source"]
