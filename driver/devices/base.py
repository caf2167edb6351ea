"""What every strategy shares: the error type, the settings, the DeviceSet a strategy returns.

Devices and counter sets are plain dicts in resource.k8s.io/v1 JSON shape (the shape they are published
in and the shape the allocator reads), built by the strategy modules next to this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from driver.gpu.model import Gpu
from driver.names import MEMORY_ENFORCEMENT_DRIVER, MEMORY_ENFORCEMENT_LIMITER

MI = 1024**2
GI = 1024**3
# GPU memory a CUDA context takes that no quota counts (the driver's own allocations, module images):
# ~300 MiB with lazy module loading (CUDA >= 11.7, default from 12.2; pytorch#107667), 300-700 MiB without
# (pytorch#20532, #28113), more with cuBLAS/cuDNN handles. 512 MiB per share covers the common case;
# --soft-context-reserve changes it. See docs/devices.md, "Memory a CUDA context takes".
DEFAULT_CONTEXT_RESERVE = 512 * MI
DEFAULT_CONTEXT_RESERVE_QUANTITY = "512Mi"  # the same, as the flags write it (a test keeps them equal)

Device = dict[str, Any]
CounterSet = dict[str, Any]


class ModelError(ValueError):
    """A GPU cannot be modelled as asked (unknown strategy, MIG on a non-MIG GPU, bad settings).

    The message names the GPU or setting and the field, and is shown to the user as one line.
    """


# Bounds of Settings.split_count (the chart's values schema is checked against them: hack/values_schema.py).
SPLIT_COUNT_MIN = 1
SPLIT_COUNT_MAX = 100


@dataclass(frozen=True)
class Settings:
    """Knobs of the device model (flags today, Helm values later; same names in snake_case).

    split_count: shares of one GPU (soft: the `slots` capacity; slots: the number of slot devices).
    soft_memory_step: granularity and minimum of a soft memory request, bytes (256Mi).
    soft_context_reserve: GPU memory kept back per share (soft and slots) for the CUDA context the limiter
        cannot count, bytes; the shares together offer the GPU's memory less split_count reserves.
    driver_memory: UUIDs of the GPUs whose shares' memory the driver enforces (driver/plugin/enforcement/
        backends.py chooses them); every other shareable device is enforced by the limiter.
    """

    split_count: int = 10
    soft_memory_step: int = 256 * MI
    soft_context_reserve: int = DEFAULT_CONTEXT_RESERVE
    driver_memory: frozenset[str] = frozenset()

    def memory_enforcement(self, gpu: Gpu) -> str:
        """`driver` or `limiter`: who enforces the memory of the shares of `gpu` (docs/enforcement.md)."""
        return MEMORY_ENFORCEMENT_DRIVER if gpu.uuid in self.driver_memory else MEMORY_ENFORCEMENT_LIMITER

    def shared_memory(self, gpu_memory: int) -> int:
        """What the shares of one GPU may use together: its memory less one context reserve per share."""
        return gpu_memory - self.split_count * self.soft_context_reserve

    def __post_init__(self) -> None:
        # Slots get cores = 100 / split_count percent each, so more than 100 would give slots no cores;
        # the per-slice device limit (128) is the other bound that matters, and 100 is below it.
        if not SPLIT_COUNT_MIN <= self.split_count <= SPLIT_COUNT_MAX:
            raise ModelError(
                f"settings.split_count: {self.split_count} is not in {SPLIT_COUNT_MIN}..{SPLIT_COUNT_MAX}"
            )
        if self.soft_context_reserve < 0:
            raise ModelError(f"settings.soft_context_reserve: {self.soft_context_reserve} is negative")
        if self.soft_memory_step <= 0 or self.soft_memory_step % MI:
            raise ModelError(
                f"settings.soft_memory_step: {self.soft_memory_step} is not a positive multiple of 1Mi"
            )


@dataclass(frozen=True)
class DeviceSet:
    """The devices of one GPU under one strategy, and the counter sets they consume (MIG only)."""

    gpu: Gpu
    strategy: str
    devices: tuple[Device, ...]
    counter_sets: tuple[CounterSet, ...] = field(default=())

    @property
    def consumes_counters(self) -> bool:
        return any(d.get("consumesCounters") for d in self.devices)


class Strategy(Protocol):
    """How one GPU is partitioned into devices. One module per strategy; see STRATEGIES."""

    name: str

    def check(self, gpu: Gpu) -> None:
        """Raise ModelError when `gpu` cannot take this strategy."""

    def devices(self, gpu: Gpu, settings: Settings) -> DeviceSet:
        """The devices (and counter sets) of `gpu` under this strategy."""
        ...
