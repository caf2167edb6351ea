"""What every strategy shares: the error type, the settings, the DeviceSet a strategy returns.

Devices and counter sets are plain dicts in resource.k8s.io/v1 JSON shape (the shape they are published
in and the shape the allocator reads), built by the strategy modules next to this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from driver.gpu.model import Gpu

MI = 1024**2
GI = 1024**3

Device = dict[str, Any]
CounterSet = dict[str, Any]


class ModelError(ValueError):
    """A GPU cannot be modelled as asked (unknown strategy, MIG on a non-MIG GPU, bad settings).

    The message names the GPU or setting and the field, and is shown to the user as one line.
    """


@dataclass(frozen=True)
class Settings:
    """Knobs of the device model (flags today, Helm values later; same names in snake_case).

    split_count: shares of one GPU (soft: the `slots` capacity; slots: the number of slot devices).
    soft_memory_step: granularity and minimum of a soft memory request, bytes (256Mi).
    """

    split_count: int = 10
    soft_memory_step: int = 256 * MI

    def __post_init__(self) -> None:
        # Slots get cores = 100 / split_count percent each, so more than 100 would give slots no cores;
        # the per-slice device limit (128) is the other bound that matters, and 100 is below it.
        if not 1 <= self.split_count <= 100:
            raise ModelError(f"settings.split_count: {self.split_count} is not in 1..100")
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
