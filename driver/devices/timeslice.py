"""`timeslice`: one device per GPU that up to split-count claims share by taking turns, with no quota.

Nothing is enforced inside the container (no limiter, no MIG: the claims' contexts take turns on the whole
GPU), but the scheduler still has to keep the sharers of one GPU within what the GPU can hold. Without
capacity, a device with `allowMultipleAllocations` takes any number of claims: forty 16 GiB servers on one
80 GB GPU would all be allocated and then fail with out-of-memory on the node. So the device publishes the
same two bounds NVIDIA's time-slicing publishes as `replicas` and a share's memory:
- `slots` = split count, one per claim (validValues ["1"]): at most split-count sharers per GPU;
- `memory`: the GPU's shareable memory (less one context reserve per sharer, as soft) with soft's request
  policy: a claim asks for the memory its processes need, or gets 1/split-count of the GPU by default.
Both are bookkeeping for the scheduler, not quotas: the claim status still says `TimeSliced` (no quota).
There is no `cores` capacity: time-slicing gives each sharer turns on all SMs, it reserves no compute.
Every capacity has a request policy: on a shared device a capacity without one is consumed whole by every
allocation, which would make the device exclusive again.
"""

from __future__ import annotations

from driver import names
from driver.devices.attributes import common_attributes, quantity
from driver.devices.base import DeviceSet, ModelError, Settings
from driver.devices.soft import memory_policy, slots_capacity
from driver.gpu.model import Gpu


class TimeSlice:
    name = names.STRATEGY_TIMESLICE

    def check(self, gpu: Gpu) -> None:
        """Every GPU with at least one memory step per sharer can be time-sliced (checked in devices())."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        memory = settings.shared_memory(gpu.memory_bytes)
        try:
            mem_policy = memory_policy(memory, settings.soft_memory_step, settings.split_count)
        except ModelError as e:
            raise ModelError(f"{gpu.name} ({gpu.product}): timeslice: {e}") from None
        device = {
            "name": gpu.name,
            "attributes": common_attributes(gpu, names.TYPE_TIMESLICE),
            "allowMultipleAllocations": True,
            "capacity": {
                "memory": {"value": quantity(memory), "requestPolicy": mem_policy},
                "slots": slots_capacity(settings.split_count),
            },
        }
        return DeviceSet(gpu=gpu, strategy=self.name, devices=(device,))
