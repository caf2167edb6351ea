"""`timeslice`: one device per GPU that any number of claims may share, with no quota.

It publishes no capacity on purpose: on a device with `allowMultipleAllocations`, a capacity without a
request policy is consumed whole by every allocation, which would make the device exclusive again.
"""

from __future__ import annotations

from driver import names
from driver.devices.attributes import common_attributes
from driver.devices.base import DeviceSet, Settings
from driver.gpu.model import Gpu


class TimeSlice:
    name = names.STRATEGY_TIMESLICE

    def check(self, gpu: Gpu) -> None:
        """Every GPU can be time-sliced."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        device = {
            "name": gpu.name,
            "attributes": common_attributes(gpu, names.TYPE_TIMESLICE),
            "allowMultipleAllocations": True,
        }
        return DeviceSet(gpu=gpu, strategy=self.name, devices=(device,))
