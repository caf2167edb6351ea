"""`slots`: N independent devices per GPU, each 1/N of it, for clusters without consumable capacity.

A claim that needs more than one slot asks for several with a `matchAttribute` constraint on
`gpu.carve.dev/parentUUID`, so they land on the same physical GPU.
"""

from __future__ import annotations

from driver import names
from driver.devices.attributes import common_attributes, fixed_capacity
from driver.devices.base import DeviceSet, Settings
from driver.gpu.model import Gpu


def slot_name(gpu: Gpu, k: int) -> str:
    return f"{gpu.name}-slot-{k}"


class Slots:
    name = names.STRATEGY_SLOTS

    def check(self, gpu: Gpu) -> None:
        """Every GPU can be cut into slots."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        n = settings.split_count
        devices = []
        for k in range(n):
            attributes = common_attributes(gpu, names.TYPE_SLOT)
            attributes["slot"] = {"int": k}
            attributes["slotCount"] = {"int": n}
            # Rounded down, so N slots never promise more than the GPU has.
            capacity = fixed_capacity(gpu.memory_bytes // n, gpu.multiprocessors // n, 100 // n)
            devices.append({"name": slot_name(gpu, k), "attributes": attributes, "capacity": capacity})
        return DeviceSet(gpu=gpu, strategy=self.name, devices=tuple(devices))
