"""GPU health for the device plugin: NVML answers for each GPU, or it is unhealthy.

A GPU whose handle or memory query fails (e.g. NVML_ERROR_GPU_IS_LOST after an Xid 79) is reported
Unhealthy in ListAndWatch, so the kubelet stops counting its device IDs as allocatable, and in the node
inventory, so the extender stops placing pods on it. A GPU that answers again is healthy again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pynvml

from driver.gpu.model import Gpu


def nvml_probe(uuid: str) -> bool:
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        pynvml.nvmlDeviceGetMemoryInfo(handle)
        return True
    except pynvml.NVMLError:
        return False


def health_of(gpus: Iterable[Gpu], probe: Callable[[str], bool] = nvml_probe) -> dict[str, bool]:
    return {g.uuid: probe(g.uuid) for g in gpus}
