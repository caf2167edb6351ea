"""KubeObjects: the ObjectApi half of KubeCluster (list, watch, get, create, update of the kinds in
OBJECT_KINDS) over the `kubernetes` client's typed APIs.

Lists and watches read the server's JSON as it is (`_preload_content=False`, the watch's raw objects), so
the controller sees every field, including those of kinds the client has no model for (carve.dev).
Both decode one object at a time with a nesting limit (decode.py): an object that cannot be decoded is
left out and logged (and kept in `undecodable`), never an error for the whole list or watch.
Writes of Leases and Events go through the client's models, like ResourceSlices in kube.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from driver.cluster.base import OBJECT_KINDS, ClusterError, Expired
from driver.cluster.decode import BadObject, DecodeError, decode_list, decode_object
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

CRD_GROUP, CRD_VERSION = "carve.dev", "v1alpha1"
_CRDS = ("nodepartitionings", "partitioningpolicies")


class KubeObjects:
    api_client: Any
    request_timeout: float
    _call: Callable[..., Any]
    to_model: Callable[..., Any]
    to_dict: Callable[..., Any]

    def _apis(self) -> tuple[Any, Any, Any, Any]:
        return (
            client.ResourceV1Api(self.api_client),
            client.CoreV1Api(self.api_client),
            client.CustomObjectsApi(self.api_client),
            client.CoordinationV1Api(self.api_client),
        )

    def _lister(self, plural: str) -> Callable[..., Any]:
        resource, core, custom, _ = self._apis()
        if plural in _CRDS:

            def crd(**kw: Any) -> Any:
                return custom.list_cluster_custom_object(CRD_GROUP, CRD_VERSION, plural, **kw)

            return crd
        listers = {
            "resourceclaims": resource.list_resource_claim_for_all_namespaces,
            "resourceslices": resource.list_resource_slice,
            "deviceclasses": resource.list_device_class,
            "nodes": core.list_node,
            "namespaces": core.list_namespace,
        }
        try:
            return listers[plural]
        except KeyError:
            raise ClusterError(f"{plural}: cannot be listed or watched by carve", plural) from None

    def list_objects(self, plural: str, field_selector: str = "") -> tuple[list[dict[str, Any]], str]:
        lister = self._lister(plural)
        resp = self._call(
            plural,
            "",
            "",
            lambda: lister(
                field_selector=field_selector or None,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            ),
        )
        api_version, kind, _ = OBJECT_KINDS[plural]
        try:
            top, good, bad = decode_list(resp.data or b"{}")
        except DecodeError as e:
            raise ClusterError(f"{plural}: list: {e}", plural) from None
        for b in bad:
            self._undecodable(plural, BadObject(b.kind or kind, b.namespace, b.name, b.uid, b.reason))
        items = [{"apiVersion": api_version, "kind": kind, **item} for item in good]
        meta = top.get("metadata") if isinstance(top.get("metadata"), dict) else {}
        return items, str(meta.get("resourceVersion") or "")

    def _undecodable(self, plural: str, bad: BadObject) -> None:
        """Log an object left out of a list or watch, and keep it for whoever reports on objects."""
        found = self.__dict__.setdefault("undecodable", {})
        found[(plural, bad.namespace, bad.name)] = bad
        event(log, logging.WARNING, "api.undecodable-object", kind=bad.kind, namespace=bad.namespace,
              object=bad.name, error=bad.reason, action="left out; the rest of the list is used")

    def watch_objects(
        self, plural: str, resource_version: str, timeout_s: int, field_selector: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """One watch request, read line by line as the server streams it (the client's Watch helper
        would re-type every object; the raw JSON is what carve wants)."""
        lister = self._lister(plural)
        api_version, kind, _ = OBJECT_KINDS[plural]
        resp = self._call(
            plural,
            "",
            "",
            lambda: lister(
                watch=True,
                field_selector=field_selector or None,
                resource_version=resource_version or None,
                timeout_seconds=timeout_s,
                allow_watch_bookmarks=True,
                _preload_content=False,
                _request_timeout=timeout_s + 10,
            ),
        )
        try:
            if resp.status >= 400:
                body = resp.data.decode(errors="replace") if resp.data else ""
                if resp.status == 410:
                    raise Expired(f"{plural}: watch from {resource_version}: gone", plural, status=410)
                raise ClusterError(f"{plural}: watch: {resp.status}: {body}", plural, status=resp.status)
            for line in iter_resp_lines(resp):
                if not line or not line.strip():
                    continue
                try:
                    ev = decode_object(line, f"{plural}: watch event")
                except DecodeError as e:
                    # One object's event is lost, not the watch: the next list has the object's state
                    # (left out there too while it stays undecodable).
                    self._undecodable(plural, BadObject(kind, "", "", "", str(e)))
                    continue
                if not isinstance(ev, dict):
                    continue
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired(
                            f"{plural}: watch from {resource_version}: {obj.get('message')}",
                            plural,
                            status=410,
                        )
                    raise ClusterError(
                        f"{plural}: watch error: {obj.get('message')}", plural, status=obj.get("code")
                    )
                if ev.get("type") == "BOOKMARK":
                    continue
                yield ev["type"], {"apiVersion": api_version, "kind": kind, **obj}
        finally:
            resp.close()
            resp.release_conn()

    def get_object(self, plural: str, name: str, namespace: str = "") -> dict[str, Any]:
        _, core, custom, coordination = self._apis()
        if plural == "nodes":  # the plugin reads its own Node's annotations (gpu.carve.dev/strategy)
            got = self._call(
                plural, name, "", lambda: core.read_node(name, _request_timeout=self.request_timeout)
            )
            return {"apiVersion": "v1", "kind": "Node", **self.to_dict(got)}
        if plural in _CRDS:
            return self._call(
                plural,
                name,
                "",
                lambda: custom.get_cluster_custom_object(
                    CRD_GROUP, CRD_VERSION, plural, name, _request_timeout=self.request_timeout
                ),
            )
        if plural == "leases":
            got = self._call(
                plural,
                name,
                namespace,
                lambda: coordination.read_namespaced_lease(
                    name, namespace, _request_timeout=self.request_timeout
                ),
            )
            return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **self.to_dict(got)}
        raise ClusterError(f"{plural}: get is not used by carve", plural, name, namespace)

    def create_object(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        _, core, custom, coordination = self._apis()
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name") or meta.get("generateName", ""), meta.get("namespace", "")
        if plural in _CRDS:
            return self._call(
                plural,
                name,
                "",
                lambda: custom.create_cluster_custom_object(
                    CRD_GROUP,
                    CRD_VERSION,
                    plural,
                    obj,
                    field_manager="carve",
                    _request_timeout=self.request_timeout,
                ),
            )
        if plural == "leases":
            body = self.to_model(obj, "V1Lease")
            got = self._call(
                plural,
                name,
                namespace,
                lambda: coordination.create_namespaced_lease(
                    namespace, body, field_manager="carve", _request_timeout=self.request_timeout
                ),
            )
            return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **self.to_dict(got)}
        if plural == "resourceclaimtemplates":  # the controller's HAMi webhook (driver/convert/webhook.py)
            return self._call(
                plural,
                name,
                namespace,
                lambda: custom.create_namespaced_custom_object(
                    "resource.k8s.io",
                    "v1",
                    namespace,
                    plural,
                    obj,
                    field_manager="carve",
                    _request_timeout=self.request_timeout,
                ),
            )
        if plural == "events":
            body = self.to_model(obj, "CoreV1Event")
            got = self._call(
                plural,
                name,
                namespace,
                lambda: core.create_namespaced_event(namespace, body, _request_timeout=self.request_timeout),
            )
            return self.to_dict(got)
        raise ClusterError(f"{plural}: create is not used by carve", plural, name, namespace)

    def update_object(self, plural: str, obj: dict[str, Any], status: bool = False) -> dict[str, Any]:
        _, _, custom, coordination = self._apis()
        meta = obj.get("metadata") or {}
        name, namespace = meta.get("name", ""), meta.get("namespace", "")
        if plural in _CRDS:
            replace = (
                custom.replace_cluster_custom_object_status
                if status
                else custom.replace_cluster_custom_object
            )
            return self._call(
                plural,
                name,
                "",
                lambda: replace(
                    CRD_GROUP,
                    CRD_VERSION,
                    plural,
                    name,
                    obj,
                    field_manager="carve",
                    _request_timeout=self.request_timeout,
                ),
            )
        if plural == "leases":
            body = self.to_model(obj, "V1Lease")
            got = self._call(
                plural,
                name,
                namespace,
                lambda: coordination.replace_namespaced_lease(
                    name, namespace, body, field_manager="carve", _request_timeout=self.request_timeout
                ),
            )
            return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **self.to_dict(got)}
        raise ClusterError(f"{plural}: update is not used by carve", plural, name, namespace)
