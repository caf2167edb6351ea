"""Which pod and container hold a set of device IDs, and what the extender assigned to them.

At PreStartContainer the kubelet has already recorded the container's device IDs (it records them as soon as
Allocate returns), and its PodResources API lists them per pod and container. Device IDs are never held by
two live containers at once, so the IDs name exactly one pod. The pod's limits then come from the trusted
assignment record of that pod's UID, checked against the node and the pod; never from the pod's own
annotations (docs/legacy.md, "Pod identity").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from api.grpc import podresources_v1_pb2 as prpb
from api.grpc import podresources_v1_pb2_grpc as prgrpc
from driver.cluster.base import ClusterError, NotFound
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


class PodResourcesClient:
    """The kubelet's PodResources v1 List over its unix socket."""

    def __init__(self, socket: str, timeout_s: float = 5.0) -> None:
        self.socket = socket
        self.timeout_s = timeout_s

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
    try:
        pod = api.get_pod(ns, name)
    except ClusterError as e:
        raise IdentityError(f"{who}: reading the pod: {e}") from None
    uid = (pod.get("metadata") or {}).get("uid", "")
    if (pod.get("spec") or {}).get("nodeName") != node:
        raise IdentityError(
            f"{who}: spec.nodeName is {pod.get('spec', {}).get('nodeName')!r}, not this node {node}"
        )
    try:
        record = parse_record(api.get_configmap(namespace, record_name(uid)))
    except NotFound:
        raise IdentityError(
            f"{who} ({uid}): no assignment record {namespace}/{record_name(uid)}; was it scheduled by the "
            "carve scheduler (schedulerName)?"
        ) from None
    except (ClusterError, RecordError) as e:
        raise IdentityError(f"{who} ({uid}): assignment record: {e}") from None
    if record.uid != uid or record.namespace != ns or record.name != name or record.node != node:
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
