"""MigOps and the MIG mode switch on NVML (driver/gpu/mig.py), as the preparer and modes.py use them."""

from __future__ import annotations

from driver.gpu.model import MigInstance


class NvmlMig:
    def create(self, gpu_uuid: str, profile: str, start: int) -> MigInstance:
        from driver.gpu.mig import create_mig_instance

        # reuse=False: an instance already at the placement is not ours (the preparer adopts recorded ones).
        return create_mig_instance(gpu_uuid, profile, start, reuse=False)

    def destroy(
        self, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None, uuid: str
    ) -> None:
        from driver.gpu.mig import destroy_mig_instance

        destroy_mig_instance(gpu_uuid, gpu_instance_id, compute_instance_id, uuid)

    def instances(self, gpu_uuid: str) -> list[MigInstance]:
        from driver.gpu.mig import list_mig_instances

        return list(list_mig_instances(gpu_uuid))

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> tuple[bool, bool | None]:
        from driver.gpu.mig import set_mig_mode

        return set_mig_mode(gpu_uuid, enabled)

    def mig_mode(self, gpu_uuid: str) -> tuple[bool, bool | None]:
        from driver.gpu.mig import get_mig_mode

        return get_mig_mode(gpu_uuid)
