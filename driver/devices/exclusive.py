"""`exclusive`: the whole GPU is one device, allocated to one claim at a time."""

from __future__ import annotations

from driver import names
from driver.devices.attributes import common_attributes, fixed_capacity
from driver.devices.base import DeviceSet, Settings
from driver.gpu.model import Gpu


class Exclusive:
    name = names.STRATEGY_EXCLUSIVE

    def check(self, gpu: Gpu) -> None:
        """Every GPU can be handed out whole."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        device = {
            "name": gpu.name,
            "attributes": common_attributes(gpu, names.TYPE_GPU),
            "capacity": fixed_capacity(gpu.memory_bytes, gpu.multiprocessors),
        }
        return DeviceSet(gpu=gpu, strategy=self.name, devices=(device,))
