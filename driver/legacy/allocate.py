"""The device plugin's answers, pure: advertised device IDs, Allocate responses, and a container's limits.

Allocate knows no pod (the kubelet's request carries only device IDs), so its answer depends on the device
IDs alone: it names one CDI device per ID, `k8s.gpu.carve.dev/claim=legacy-<key>-<i>`, where the key
is a hash of the IDs (one ID per GPU the container asked for). What those CDI devices contain (limits,
GPUs, limiter mounts) is written at PreStartContainer, once the kubelet's PodResources API says which pod
holds those IDs (docs/legacy.md, "Pod identity").

A container's limits are computed by the DRA path's own `claim_limits`, from a plan equal to a soft claim of
the same size: one soft-slice share per assigned GPU, consuming the assigned memory and cores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from api.grpc import deviceplugin_v1beta1_pb2 as pb
from api.v1alpha1.config import SliceConfig
from driver import names
from driver.gpu.model import Gpu
from driver.legacy.records import ContainerAssignment
from driver.limits import ClaimLimits
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimPlan, ClaimRef, PlannedDevice, claim_limits
from driver.plugin.container.edits import region_container_path

MIB = 1024**2
DELIVERIES = ("cdi-field", "cdi-annotation")
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


class AllocateError(ValueError):
    """A request the plugin cannot answer; the message names the device IDs and the reason."""


def device_ids(gpus: Iterable[Gpu], split: int) -> list[tuple[str, Gpu]]:
    """`<GPU-UUID>-<i>` for i < split, per GPU (HAMi's form; at most 63 characters)."""
    return [(f"{g.uuid}-{i}", g) for g in gpus for i in range(split)]


def allocation_key(ids: Sequence[str]) -> str:
    """Same IDs, same key: the kubelet reuses a checkpointed response after a restart, and the key finds
    the files that response names."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:24]


def allocation_uid(ids: Sequence[str]) -> str:
    return f"{names.LEGACY_CDI_PREFIX}{allocation_key(ids)}"


def cdi_names(ids: Sequence[str]) -> list[str]:
    """CDI device names of an allocation: one per device ID, i.e. one per GPU of the container."""
    uid = allocation_uid(ids)
    return [names.cdi_device_name(uid, str(i)) for i in range(len(ids))]


def cdi_ids(ids: Sequence[str]) -> list[str]:
    return [f"{names.CDI_KIND}={n}" for n in cdi_names(ids)]


def container_response(ids: Sequence[str], delivery: str) -> pb.ContainerAllocateResponse:
    if not ids:
        raise AllocateError("Allocate: a container request without device IDs")
    devices = cdi_ids(ids)
    if delivery == "cdi-field":
        return pb.ContainerAllocateResponse(cdi_devices=[pb.CDIDevice(name=d) for d in devices])
    if delivery == "cdi-annotation":
        # Kubelets before 1.29 (1.28 without its gate) drop cdi_devices; runtimes with CDI on
        # (containerd >= 1.7, CRI-O) resolve the devices named in cdi.k8s.io/* annotations instead.
        return pb.ContainerAllocateResponse(
            annotations={
                f"{CDI_ANNOTATION_PREFIX}{names.CDI_VENDOR}_{allocation_key(ids)}": ",".join(devices)
            }
        )
    raise AllocateError(f"delivery {delivery!r}: expected one of {', '.join(DELIVERIES)}")


def container_limits(
    namespace: str,
    pod: str,
    ids: Sequence[str],
    assignment: ContainerAssignment,
    gpus: dict[str, Gpu],
    node: str,
) -> ClaimLimits:
    """The limiter settings of a container: those of a soft claim of the same size (claim_limits)."""
    uid = allocation_uid(ids)
    planned = []
    for d in assignment.devices:
        gpu = gpus.get(d.uuid)
        if gpu is None:
            raise AllocateError(f"pod {namespace}/{pod}: assigned GPU {d.uuid} is not on node {node}")
        device = NodeDevice(
            name=gpu.name,
            type=names.TYPE_VGPU,
            gpu_uuid=gpu.uuid,
            minor=gpu.minor,
            capacity={"memory": gpu.memory_bytes, "cores": 100},
            pci_bus_id=gpu.pci_bus_id,
        )
        planned.append(
            PlannedDevice(
                request=assignment.name,
                pool=node,
                device=device,
                share_id=None,
                config=SliceConfig(priority=assignment.priority),
                consumed={"memory": d.memoryMiB * MIB, "cores": d.cores},
            )
        )
    plan = ClaimPlan(ref=ClaimRef(namespace, pod, uid), devices=tuple(planned))
    limits = claim_limits(plan, region_container_path(uid))
    assert limits is not None  # every planned device is a soft slice
    return limits
