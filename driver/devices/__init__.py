"""The device model: (Gpu, strategy) -> devices and counter sets -> ResourceSlices. Pure: no I/O.

One module per strategy (exclusive, soft, slots, mig, timeslice, mps), chosen once through STRATEGIES;
slices.py chunks the devices of a node into ResourceSlices within the API limits of a Kubernetes
version (limits.py); catalog.py builds Gpu records of emulated models for tests and simulations.
"""

from __future__ import annotations

from driver import names
from driver.devices.base import DeviceSet, ModelError, Settings, Strategy
from driver.devices.exclusive import Exclusive
from driver.devices.mig import Mig
from driver.devices.mps import Mps
from driver.devices.slots import Slots
from driver.devices.soft import Soft
from driver.devices.timeslice import TimeSlice
from driver.gpu.model import Gpu

STRATEGIES: dict[str, Strategy] = {
    s.name: s for s in (Exclusive(), Soft(), Slots(), Mig(), TimeSlice(), Mps())
}
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
    """'0=mig,1=soft,2=exclusive' or 'soft' or '0=mig,soft' -> {gpu index: strategy}.

    A bare strategy is the default for every GPU not named; GPUs neither named nor defaulted are
    `exclusive`. Errors name the offending token.
    """
    indices = {g.index for g in gpus}
    default: str | None = None
    chosen: dict[int, str] = {}
    tokens = [t.strip() for t in (spec or "").split(",")]
    if not any(tokens):
        raise ModelError(f"strategy spec {spec!r} is empty; e.g. 'soft' or '0=mig,1=soft'")
    for token in tokens:
        if not token:
            raise ModelError(f"strategy spec {spec!r}: empty item")
        key, sep, value = token.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            if default is not None:
                raise ModelError(f"strategy spec {spec!r}: {token!r}: a second default strategy")
            try:
                strategy(key)
            except ModelError as e:
                raise ModelError(f"strategy spec {spec!r}: {token!r}: {e}; or <index>=<strategy>") from None
            default = key
            continue
        if not key.isdigit():
            raise ModelError(f"strategy spec {spec!r}: {token!r}: {key!r} is not a GPU index")
        index = int(key)
        if index not in indices:
            raise ModelError(
                f"strategy spec {spec!r}: {token!r}: no GPU with index {index} "
                f"(indices {', '.join(map(str, sorted(indices))) or 'none'})"
            )
        if index in chosen:
            raise ModelError(f"strategy spec {spec!r}: {token!r}: GPU {index} named twice")
        try:
            strategy(value)
        except ModelError as e:
            raise ModelError(f"strategy spec {spec!r}: {token!r}: {e}") from None
        chosen[index] = value
    return {g.index: chosen.get(g.index, default or DEFAULT_STRATEGY) for g in gpus}


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
