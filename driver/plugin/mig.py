"""MigOps on NVML (driver/gpu/mig.py), and turning MIG mode on for GPUs given the mig strategy."""

from __future__ import annotations

import logging

from driver import names
from driver.gpu.model import Gpu, MigInstance
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)


class NvmlMig:
    def create(self, gpu_uuid: str, profile: str, start: int) -> MigInstance:
        from driver.gpu.mig import create_mig_instance

        return create_mig_instance(gpu_uuid, profile, start)

    def destroy(self, gpu_uuid: str, gpu_instance_id: int) -> None:
        from driver.gpu.mig import destroy_mig_instance

        destroy_mig_instance(gpu_uuid, gpu_instance_id)

    def instances(self, gpu_uuid: str) -> list[MigInstance]:
        from driver.gpu.mig import list_mig_instances

        return list(list_mig_instances(gpu_uuid))


def ensure_mig_mode(gpus: list[Gpu], strategy_spec: str, backend: str, node_name: str) -> list[Gpu]:
    """Enable MIG mode on GPUs whose strategy is mig; returns the re-read inventory when anything changed."""
    from driver.devices import parse_strategy_spec

    strategies = parse_strategy_spec(strategy_spec, gpus)
    todo = [
        g
        for g in gpus
        if strategies.get(g.index) == names.STRATEGY_MIG and g.mig_capable and not g.mig_enabled
    ]
    if not todo:
        return gpus
    from driver.gpu import discover
    from driver.gpu.mig import enable_mig

    for g in todo:
        enable_mig(g.uuid)
        event(log, logging.INFO, "mig.mode-enabled", gpu=g.name, uuid=g.uuid)
    return discover(backend, node_name)
