"""Which pod and container hold a set of device IDs, and what the extender assigned to them.

At PreStartContainer the kubelet has already recorded the container's device IDs (it records them as soon as
Allocate returns), and its PodResources API lists them per pod and container. Device IDs are never held by
two live containers at once, so the IDs name exactly one pod (namespace and name). PodResources gives no pod
UID: the kubelet's device manager checkpoint (`<device-plugin dir>/kubelet_internal_checkpoint`, written when
Allocate returns, root-only on the node) names the UID of the pod holding the IDs. The pod's limits then
come from the trusted assignment record the extender wrote for that UID on this node (the records of this
node, listed by their node label in the release namespace), which must also name the same namespace and
pod; never from the pod's own annotations, and without reading the pod from the API server: the device
plugin needs no read access to the cluster's pods (docs/legacy.md, "Pod identity"; docs/security.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from api.grpc import podresources_v1_pb2 as prpb
from api.grpc import podresources_v1_pb2_grpc as prgrpc
from driver import names
from driver.cluster.base import ClusterError
from driver.legacy.kubeapi import LegacyApi
from driver.legacy.records import ContainerAssignment, RecordError, parse_record, record_name


class IdentityError(Exception):
    """The pod of an allocation cannot be established exactly; the message says which step failed."""


@dataclass(frozen=True)
class Holder:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class Resolved:
    namespace: str
    pod: str
    pod_uid: str
    container: ContainerAssignment


MAX_CHECKPOINT_BYTES = 64 << 20  # the kubelet's checkpoint grows with the node's allocations; a bound anyway


def pod_uids_in_checkpoint(path: Path, resource: str, ids: Sequence[str]) -> set[str]:
    """The UIDs of the pods the kubelet's device manager checkpoint records holding exactly `ids` of
    `resource` (in one container). DeviceIDs is a list in old kubelets and {NUMA node: list} since 1.20.
    The file is the kubelet's (root-only, not a tenant's); its checksum is not re-derived here."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CHECKPOINT_BYTES + 1)
    except OSError as e:
        raise IdentityError(f"kubelet checkpoint {path}: {e.strerror}") from None
    if len(raw) > MAX_CHECKPOINT_BYTES:
        raise IdentityError(f"kubelet checkpoint {path}: larger than {MAX_CHECKPOINT_BYTES} bytes")
    try:
        entries = json.loads(raw)["Data"]["PodDeviceEntries"] or []
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nesting past the stack
        raise IdentityError(
            f"kubelet checkpoint {path}: Data.PodDeviceEntries: not the kubelet's format"
        ) from None
    wanted, found = set(ids), set()
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or entry.get("ResourceName") != resource:
            continue
        held = entry.get("DeviceIDs")
        if isinstance(held, dict):
            held = [i for per_numa in held.values() if isinstance(per_numa, list) for i in per_numa]
        if (
            isinstance(held, list)
            and all(isinstance(i, str) for i in held)  # device IDs are strings; anything else is no entry
            and set(held) == wanted
            and isinstance(entry.get("PodUID"), str)
        ):
            found.add(entry["PodUID"])
    return found


class PodResourcesClient:
    """The kubelet's PodResources v1 List over its unix socket, and its device manager checkpoint."""

    def __init__(self, socket: str, timeout_s: float = 5.0, checkpoint: Path | None = None) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        # default: beside the PodResources socket's kubelet, <device-plugin dir>/kubelet_internal_checkpoint
        self.checkpoint = checkpoint

    def pod_uids(self, resource: str, ids: Sequence[str]) -> set[str]:
        if self.checkpoint is None:
            raise IdentityError("no kubelet checkpoint configured: the pod's UID cannot be told")
        return pod_uids_in_checkpoint(self.checkpoint, resource, ids)

    def holders(self, resource: str, ids: Sequence[str]) -> list[Holder]:
        wanted = set(ids)
        try:
            with grpc.insecure_channel(f"unix://{self.socket}") as channel:
                listed = prgrpc.PodResourcesListerStub(channel).List(
                    prpb.ListPodResourcesRequest(), timeout=self.timeout_s
                )
        except grpc.RpcError as e:
            raise IdentityError(f"PodResources {self.socket}: {e.code().name}: {e.details()}") from None
        found = []
        for p in listed.pod_resources:
            for c in p.containers:
                held = {i for d in c.devices if d.resource_name == resource for i in d.device_ids}
                if held == wanted:
                    found.append(Holder(p.namespace, p.name, c.name))
        return found

    def allocated(self, resource: str) -> set[frozenset[str]]:
        """Every device-ID set the kubelet has handed to a container (for collecting stale allocations)."""
        with grpc.insecure_channel(f"unix://{self.socket}") as channel:
            listed = prgrpc.PodResourcesListerStub(channel).List(
                prpb.ListPodResourcesRequest(), timeout=self.timeout_s
            )
        out = set()
        for p in listed.pod_resources:
            for c in p.containers:
                held = frozenset(i for d in c.devices if d.resource_name == resource for i in d.device_ids)
                if held:
                    out.add(held)
        return out


def resolve(
    ids: Sequence[str],
    resource: str,
    node: str,
    pod_resources: PodResourcesClient,
    api: LegacyApi,
    namespace: str,
) -> Resolved:
    """The pod, container and assignment of the container holding exactly `ids` on this node."""
    holders = pod_resources.holders(resource, ids)
    if not holders:
        raise IdentityError(f"devices {sorted(ids)}: no container holds them in the kubelet's PodResources")
    pods = {(h.namespace, h.pod) for h in holders}
    if len(pods) > 1:
        raise IdentityError(f"devices {sorted(ids)}: held by several pods {sorted(pods)}; refusing to guess")
    ns, name = pods.pop()
    who = f"pod {ns}/{name}"
    uids = pod_resources.pod_uids(resource, ids)
    if len(uids) != 1:
        raise IdentityError(
            f"{who}: the kubelet's checkpoint names {sorted(uids) or 'no pod'} as holding {sorted(ids)}"
        )
    (uid,) = uids
    selector = f"{names.LEGACY_RECORD_NODE_LABEL}={node}"
    try:
        listed = api.list_configmaps(namespace, selector)
    except ClusterError as e:
        raise IdentityError(f"{who}: listing the assignment records of node {node}: {e}") from None
    records = []
    for obj in listed:
        try:
            a = parse_record(obj)
        except RecordError:
            continue  # another pod's broken record is that pod's problem
        if a.uid == uid:
            records.append(a)
    if not records:
        raise IdentityError(
            f"{who} ({uid}): no assignment record {namespace}/{record_name(uid)} on node {node}; was it "
            "scheduled by the carve scheduler (schedulerName)?"
        )
    record = records[0]
    if record.namespace != ns or record.name != name or record.node != node:
        raise IdentityError(
            f"{who} ({uid}): assignment record names {record.namespace}/{record.name} ({record.uid}) "
            f"on {record.node}"
        )
    # Init containers hand their devices on to app containers (the kubelet reuses them): one set of IDs may
    # be listed for both. The app container's assignment governs; the init container ran before it.
    names_holding = [h.container for h in holders]
    assigned = [c for c in record.containers if c.name in names_holding]
    assigned.sort(key=lambda c: c.init)
    if not assigned:
        raise IdentityError(f"{who} ({uid}): containers {names_holding} have no GPU assignment in the record")
    chosen = assigned[0]
    if len(chosen.devices) != len(ids):
        raise IdentityError(
            f"{who} ({uid}): container {chosen.name}: the kubelet allocated {len(ids)} devices, "
            f"the assignment has {len(chosen.devices)} GPUs"
        )
    return Resolved(ns, name, uid, chosen)
