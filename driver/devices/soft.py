"""`soft`: one shareable device per GPU with consumable capacity (DRAConsumableCapacity).

Claims request `memory` (bytes), `cores` (percent of SMs) and take one of `slots`; the scheduler
subtracts what each share consumed, and the limiter enforces it inside the container.
The request policies must satisfy the API server's rules: min <= default <= max <= value,
min + step <= value, and default and max are min plus a whole number of steps.
"""

from __future__ import annotations

from driver import names
from driver.devices.attributes import common_attributes, enforcement_attributes, quantity
from driver.devices.base import DeviceSet, ModelError, Settings
from driver.gpu.model import Gpu


def memory_policy(total: int, step: int, split_count: int) -> dict[str, object]:
    """Requests from `step` to the whole GPU in `step`s; default: 1/split_count of the GPU, rounded down."""
    if total < step:
        raise ModelError(f"shareable memory {total} bytes is below the soft memory step {step}")
    maximum = step * (total // step)  # a GPU of 81559Mi offers at most 81408Mi in 256Mi steps
    default = max(step, step * ((total // split_count) // step))
    return {
        "default": quantity(default),
        "validRange": {"min": quantity(step), "max": quantity(maximum), "step": quantity(step)},
    }


def slots_capacity(split_count: int) -> dict[str, object]:
    """Each share takes exactly one slot: at most split_count shares per GPU (soft, mps, timeslice)."""
    return {"value": str(split_count), "requestPolicy": {"default": "1", "validValues": ["1"]}}


class Soft:
    name = names.STRATEGY_SOFT

    def check(self, gpu: Gpu) -> None:
        """Every GPU with at least one memory step can be soft-sliced (checked in devices())."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        # Each share's CUDA context takes memory the limiter does not count: keep one reserve per slot back.
        memory = settings.shared_memory(gpu.memory_bytes)
        try:
            mem_policy = memory_policy(memory, settings.soft_memory_step, settings.split_count)
        except ModelError as e:
            raise ModelError(
                f"{gpu.name} ({gpu.product}): soft: {e} (GPU memory {gpu.memory_bytes} less "
                f"{settings.split_count} x soft context reserve {settings.soft_context_reserve})"
            ) from None
        device = {
            "name": gpu.name,
            "attributes": {
                **common_attributes(gpu, names.TYPE_VGPU),
                **enforcement_attributes(gpu, settings),
            },
            "allowMultipleAllocations": True,
            "capacity": {
                "memory": {"value": quantity(memory), "requestPolicy": mem_policy},
                # default 0: a share that asks for no cores is neither reserved nor throttled.
                "cores": {
                    "value": "100",
                    "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
                },
                "slots": slots_capacity(settings.split_count),
            },
        }
        return DeviceSet(gpu=gpu, strategy=self.name, devices=(device,))
