"""What an unhealthy GPU does to the published pool and to the Node's Events, pure.

- Device taints on (1.36+ by default; 1.34/1.35 with DRADeviceTaints): every device of the GPU (whole,
  soft, slots, MIG placements, timeslice) carries `gpu.carve.dev/unhealthy=<cause>:<effect>`.
- Effect `None` (warning only) exists from 1.35: on 1.34 such a taint would be refused, so none is
  published and the health shows in Events, metrics and the pods' status only.
- Device taints off (the publisher saw the API server drop `taints`): the GPU's devices are withdrawn
  from the pool instead.
"""

from __future__ import annotations

from typing import Any

from driver import names
from driver.plugin.events import node_event as plugin_node_event
from driver.plugin.health.policy import Change, TaintPolicy

REASON_UNHEALTHY = "GpuUnhealthy"
REASON_HEALTHY = "GpuHealthy"


def _minor(version: str) -> tuple[int, int]:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return (1, 34)  # unknown: the oldest we serve, where effect None does not exist


def health_marks(
    unhealthy: dict[int, str], policy: TaintPolicy, taints_off: bool, k8s_version: str
) -> dict[str, Any]:
    """build_slices keyword arguments (`taints`, `withdrawn`) for the GPUs unhealthy now."""
    if not unhealthy:
        return {}
    if taints_off:
        return {"withdrawn": frozenset(unhealthy)}
    taints = {}
    for index, cause in unhealthy.items():
        taint = policy.taint(cause)
        if taint["effect"] == "None" and _minor(k8s_version) < (1, 35):
            continue
        taints[index] = [taint]
    return {"taints": taints} if taints else {}


def health_event(
    node: str, change: Change, gpu: str, why: str, withdrawn: bool, effect: str
) -> dict[str, Any]:
    """A core/v1 Event on the Node for one flip."""
    if change.healthy:
        reason, kind = REASON_HEALTHY, "Normal"
        message = (
            f"{gpu} ({change.uuid}) is healthy again after {change.cause}; its devices are offered again"
        )
    else:
        reason, kind = REASON_UNHEALTHY, "Warning"
        action = (
            "its devices are withdrawn from the ResourceSlices (device taints are off on this cluster)"
            if withdrawn
            else f"its devices are tainted {names.DRIVER_NAME}/unhealthy={change.cause}:{effect}"
        )
        message = f"{gpu} ({change.uuid}) is unhealthy ({change.cause}): {why}; {action}"
    return plugin_node_event(node, reason, message, kind)
