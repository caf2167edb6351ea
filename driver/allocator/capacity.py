"""Consumable capacity, shared counters and taints: the per-device checks besides selectors.

Consumable capacity (as the 1.34+ scheduler): for every capacity of a device, what one allocation
consumes is the request rounded up by the capacity's requestPolicy (validRange: to min, then to
min + k*step; validValues: to the first value not below it), or the policy default when the
request does not name it, or the whole value when there is neither. The amount must respect the
policy (at most max, on a step, one of the valid values, or equal to the default) and, added to
what other allocations of the device hold, must not exceed the capacity's value. A request that
names a capacity the device does not have never fits that device.
"""

from __future__ import annotations

from collections.abc import Mapping

from driver.allocator import quantity as q
from driver.allocator.model import CapacitySpec, Device, Request


def consumption(request: Request, device: Device) -> dict[str, int] | None:
    """What allocating `device` for `request` consumes, per capacity; None if a requested capacity
    is not one of the device's. Memoised on the device per requested amounts (callers do not
    change the returned dict)."""
    memo = device.consumption_memo
    found = memo.get(request.capacity, memo)
    if found is not memo:
        return found
    asked = dict(request.capacity or ())
    out: dict[str, int] | None = None
    if all(name in device.capacity for name in asked):
        out = {name: _consumed(asked.get(name), spec) for name, spec in device.capacity.items()}
    memo[request.capacity] = out
    return out


def _consumed(requested: int | None, spec: CapacitySpec) -> int:
    if requested is None:
        return spec.default if spec.default is not None else spec.value
    # A capacity without a request policy has none of its fields: every branch below gives `requested`.
    if spec.range_min is not None:
        if requested < spec.range_min:
            return spec.range_min
        if spec.range_step is None:
            return requested
        steps = -(-(requested - spec.range_min) // spec.range_step)  # ceiling division
        return spec.range_min + steps * spec.range_step
    for valid in spec.valid_values:
        if requested <= valid:
            return valid
    return requested


def violates_policy(amount: int, spec: CapacitySpec) -> bool:
    # Without a request policy (none of its fields) every test below is False.
    if spec.default is not None and amount == spec.default:
        return False
    if spec.range_min is not None or spec.range_max is not None or spec.range_step is not None:
        if spec.range_max is not None and amount > spec.range_max:
            return True
        if spec.range_step is not None:
            base = spec.range_min or 0
            return (amount - base) % spec.range_step != 0
        return False
    if spec.valid_values:
        return amount not in spec.valid_values
    return False


def allowed_by_policy(spec: CapacitySpec) -> str:
    """What a request policy accepts, for messages: `must be 0..100`, `must be 256Mi..80Gi in steps of 256Mi`.
    """
    if spec.valid_values:
        return "must be one of " + ", ".join(_fmt(v, spec) for v in spec.valid_values)
    low = _fmt(spec.range_min or 0, spec)
    high = _fmt(spec.range_max, spec) if spec.range_max is not None else "any"
    step = f" in steps of {_fmt(spec.range_step, spec)}" if spec.range_step is not None else ""
    return f"must be {low}..{high}{step}"


def capacity_shortfall(device: Device, wanted: Mapping[str, int],
                       held: Mapping[str, int] | None) -> str:
    """"" if `wanted` fits next to what is `held`, else why not (for messages)."""
    for name, amount in wanted.items():
        spec = device.capacity[name]
        if violates_policy(amount, spec):
            return f"{name} {_fmt(amount, spec)}: {allowed_by_policy(spec)} (the device's request policy)"
        used = (held or {}).get(name, 0)
        if used + amount > spec.value:
            left = max(spec.value - used, 0)
            return f"{name} {_fmt(amount, spec)} requested, {_fmt(left, spec)} left"
    return ""


def _fmt(value: int, spec: CapacitySpec) -> str:
    return q.format_units(value, spec.fmt)


def format_consumed(device: Device, consumed: Mapping[str, int]) -> dict[str, str]:
    return {name: _fmt(v, device.capacity[name]) for name, v in consumed.items()}


# --- taints --------------------------------------------------------------------------------------

def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    """core/v1 toleration semantics applied to a device taint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def blocking_taint(device: Device, request: Request) -> Mapping | None:
    """The first NoSchedule/NoExecute taint the request does not tolerate (other effects never block)."""
    for taint in device.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                tolerates(t, taint) for t in request.tolerations):
            return taint
    return None


# --- counters ------------------------------------------------------------------------------------

Counters = dict[str, dict[str, int]]


def add_counters(into: Counters, device: Device, sign: int = 1) -> None:
    for cs, counters in device.consumes:
        target = into.setdefault(cs, {})
        for name, value in counters:
            target[name] = target.get(name, 0) + sign * value


def oversubscribed(sets: Counters, used: Counters) -> bool:
    """Whether recorded allocations already exceed some counter of the pool."""
    return any(used.get(cs, {}).get(name, 0) > total
               for cs, counters in sets.items() for name, total in counters.items())


def counter_shortfall(sets: Counters, used: Counters, extra: Counters, all_sets: bool = True) -> str:
    """"" if every counter of the pool stays within its set, else the first that does not.

    The scheduler checks every set of the pool, so a pool that recorded allocations already
    oversubscribe takes no more counter-consuming devices; callers that know the pool is not
    oversubscribed pass all_sets=False to check only the sets `extra` touches."""
    if not all_sets:
        for cs, wanted in extra.items():
            total_set, used_set = sets.get(cs, {}), used.get(cs, {})
            for name, want in wanted.items():
                if want and used_set.get(name, 0) + want > total_set.get(name, 0):
                    return _counter_text(cs, name, total_set.get(name, 0), used_set.get(name, 0), want)
        return ""
    for cs, counters in sets.items():
        used_set, extra_set = used.get(cs, {}), extra.get(cs, {})
        for name, total in counters.items():
            if used_set.get(name, 0) + extra_set.get(name, 0) > total:
                return _counter_text(cs, name, total, used_set.get(name, 0), extra_set.get(name, 0))
    return ""


def _counter_text(cs: str, name: str, total: int, used: int, want: int) -> str:
    left = max(total - used, 0)
    # Counters carry no format of their own here; binary reads best for memory and prints small
    # counts (slices, engines) as plain numbers anyway.
    return (f"counter {cs}/{name}: {q.format_units(want, 'BinarySI')} needed, "
            f"{q.format_units(left, 'BinarySI')} left")
