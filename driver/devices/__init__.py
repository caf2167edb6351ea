"""The device model: (Gpu, strategy) -> devices and counter sets -> ResourceSlices. Pure: no I/O.

One module per strategy (exclusive, soft, slots, mig, timeslice), chosen once through STRATEGIES;
slices.py chunks the devices of a node into ResourceSlices within the API limits of a Kubernetes
version (limits.py); catalog.py builds Gpu records of emulated models for tests and simulations.
"""

from __future__ import annotations

from driver import names
from driver.devices.base import DeviceSet, ModelError, Settings, Strategy
from driver.devices.exclusive import Exclusive
from driver.devices.mig import Mig
from driver.devices.slots import Slots
from driver.devices.soft import Soft
from driver.devices.timeslice import TimeSlice
from driver.gpu.model import Gpu

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (Exclusive(), Soft(), Slots(), Mig(), TimeSlice())}
DEFAULT_STRATEGY = names.STRATEGY_EXCLUSIVE


def strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ModelError(f"unknown strategy {name!r}; one of {', '.join(sorted(STRATEGIES))}") from None


def devices_for(gpu: Gpu, strategy_name: str, settings: Settings | None = None) -> DeviceSet:
    """The devices of one GPU under one strategy; ModelError names the GPU when it cannot take it."""
    chosen = strategy(strategy_name)
    chosen.check(gpu)
    return chosen.devices(gpu, settings or Settings())


def parse_strategy_spec(spec: str, gpus: list[Gpu]) -> dict[int, str]:
    """'0=mig,1=soft', 'soft', '*A100*=mig,soft' -> {gpu index: strategy} (driver/devices/rules.py).

    The rules' choice only: whether each GPU can run it is the caller's question (rules.can_run)."""
    from driver.devices.rules import parse_rules, resolve

    return {i: r.strategy for i, r in resolve(gpus, parse_rules(spec)).items()}


from driver.devices.limits import LIMITS, ApiLimits, SliceLimitError, limits_for, validate_slices  # noqa: E402
from driver.devices.slices import build_slices, device_sets  # noqa: E402

__all__ = [
    "DEFAULT_STRATEGY",
    "LIMITS",
    "STRATEGIES",
    "ApiLimits",
    "DeviceSet",
    "ModelError",
    "Settings",
    "SliceLimitError",
    "Strategy",
    "build_slices",
    "device_sets",
    "devices_for",
    "limits_for",
    "parse_strategy_spec",
    "validate_slices",
]
