"""The two documents the legacy shim shares through the API server, parsed and validated at this edge.

- `NodeGpus`: the node annotation `gpu.carve.dev/legacy-gpus` the device plugin writes (its GPUs, their
  memory, split count and health). Nodes are written by admins and node agents, not by tenants.
- `Assignment`: the GPUs and sizes the extender chose for one pod, kept in a ConfigMap
  `carve-legacy-<pod-uid>` in the extender's namespace. That object is the only source the device plugin
  trusts for a pod's limits: tenants cannot write it, unlike their pods' annotations (docs/legacy.md,
  "Pod identity"). The pod gets a copy in an annotation for people to read; nothing reads that copy.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from driver import names


class RecordError(ValueError):
    """A node annotation or assignment record that does not parse; the message names the object and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuInfo(_Strict):
    uuid: str = Field(min_length=1, max_length=47)
    index: int = Field(ge=0)
    minor: int = Field(ge=0)
    product: str = ""
    memoryMiB: int = Field(gt=0)
    split: int = Field(ge=1, le=1000)
    healthy: bool = True
    pciBusID: str = ""


class NodeGpus(_Strict):
    gpus: tuple[GpuInfo, ...]


class DeviceShare(_Strict):
    uuid: str = Field(min_length=1)
    memoryMiB: int = Field(ge=0)
    cores: int = Field(ge=0, le=100)


class ContainerAssignment(_Strict):
    name: str
    init: bool = False
    priority: str = Field(default="high", pattern="^(high|low)$")
    devices: tuple[DeviceShare, ...] = Field(min_length=1)


class Assignment(_Strict):
    namespace: str
    name: str
    uid: str = Field(min_length=1)
    node: str = Field(min_length=1)
    containers: tuple[ContainerAssignment, ...]

    @property
    def record_name(self) -> str:
        return record_name(self.uid)

    def container(self, name: str) -> ContainerAssignment | None:
        return next((c for c in self.containers if c.name == name), None)


def record_name(pod_uid: str) -> str:
    return f"{names.LEGACY_RECORD_PREFIX}{pod_uid}"


def parse_node_gpus(node: dict) -> NodeGpus | None:
    """The node's GPUs as its device plugin published them; None when it has published nothing."""
    meta = node.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(names.LEGACY_INVENTORY_ANNOTATION)
    if raw is None:
        return None
    try:
        return NodeGpus.model_validate_json(raw)
    except ValidationError as e:
        raise RecordError(
            f"node {meta.get('name')}: annotation {names.LEGACY_INVENTORY_ANNOTATION}: {e}"
        ) from None


def node_gpus_annotation(gpus: NodeGpus) -> dict[str, str]:
    return {names.LEGACY_INVENTORY_ANNOTATION: gpus.model_dump_json()}


def record_object(a: Assignment, namespace: str) -> dict:
    """The ConfigMap that records an assignment."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": a.record_name,
            "namespace": namespace,
            "labels": {names.LEGACY_RECORD_LABEL: "true", names.LEGACY_RECORD_NODE_LABEL: a.node},
        },
        "data": {"assignment": a.model_dump_json()},
    }


def parse_record(obj: dict) -> Assignment:
    meta = obj.get("metadata") or {}
    where = f"ConfigMap {meta.get('namespace')}/{meta.get('name')}"
    raw = (obj.get("data") or {}).get("assignment")
    if raw is None:
        raise RecordError(f"{where}: data.assignment: missing")
    try:
        a = Assignment.model_validate_json(raw)
    except ValidationError as e:
        raise RecordError(f"{where}: data.assignment: {e}") from None
    if meta.get("name") != a.record_name:
        raise RecordError(f"{where}: metadata.name: does not match the pod uid {a.uid} it records")
    return a


def pod_annotation(a: Assignment) -> dict[str, str]:
    """The copy on the pod, for `kubectl describe`: container -> [uuid:MiB:cores]."""
    summary = {c.name: [f"{d.uuid}:{d.memoryMiB}:{d.cores}" for d in c.devices] for c in a.containers}
    return {names.LEGACY_ASSIGNMENT_ANNOTATION: json.dumps(summary, sort_keys=True)}
