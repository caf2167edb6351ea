"""`slots`: N independent devices per GPU, each 1/N of it, for clusters without consumable capacity.

A claim that needs more than one slot asks for several with a `matchAttribute` constraint on
`gpu.carve.dev/parentUUID`, so they land on the same physical GPU.
"""

from __future__ import annotations

from driver import names
from driver.devices.attributes import common_attributes, enforcement_attributes, fixed_capacity
from driver.devices.base import MI, DeviceSet, ModelError, Settings
from driver.gpu.model import Gpu


def slot_name(gpu: Gpu, k: int) -> str:
    return f"{gpu.name}-slot-{k}"


class Slots:
    name = names.STRATEGY_SLOTS

    def check(self, gpu: Gpu) -> None:
        """Every GPU can be cut into slots (too little memory for the reserves fails in devices())."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        n = settings.split_count
        if settings.shared_memory(gpu.memory_bytes) < n * MI:
            raise ModelError(
                f"{gpu.name} ({gpu.product}): slots: memory {gpu.memory_bytes} leaves less than 1Mi per slot "
                f"after {n} x soft context reserve {settings.soft_context_reserve}"
            )
        devices = []
        for k in range(n):
            attributes = common_attributes(gpu, names.TYPE_SLOT)
            attributes["slot"] = {"int": k}
            attributes["slotCount"] = {"int": n}
            attributes.update(enforcement_attributes(gpu, settings))
            # Rounded down, so N slots never promise more than the GPU has; each keeps a context reserve back.
            capacity = fixed_capacity(
                settings.shared_memory(gpu.memory_bytes) // n, gpu.multiprocessors // n, 100 // n
            )
            devices.append({"name": slot_name(gpu, k), "attributes": attributes, "capacity": capacity})
        return DeviceSet(gpu=gpu, strategy=self.name, devices=tuple(devices))
