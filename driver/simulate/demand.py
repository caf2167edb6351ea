"""What a pod needs, independent of how a strategy serves it: the input of the lower bound.

The lower bound must be the same for every strategy, so it cannot look at what the allocator handed out
(a whole GPU under `exclusive` says nothing about the need). A pod's demand is, in order:
  1. its `demand:` in the trace (the generator always writes one);
  2. else, per request, the first alternative (the `exactly` request or a `firstAvailable` subrequest, in
     order) whose size can be told, times its count:
     - `capacity.requests` (soft slices): its memory and cores;
     - a MIG instance (class mig.carve.dev): the profile a selector names (`profile == "3g.40gb"`: 3 of
       7 compute slices, 40 GB), else the memory a selector asks for and one compute slice (1/7);
     - slots (class slot.carve.dev): the memory and cores its selectors ask of each slot, else
       1/split_count of a GPU each;
  3. else, whole devices: 100% cores per device, memory as a selector asks for it (else 0).
Time-sliced alternatives have no size of their own and are passed over. Every figure errs low (decimal
GB for a profile's memory, 7 compute slices per GPU), so the bound stays a bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from driver import names
from driver.allocator.quantity import of as quantity_of
from driver.simulate.inputs import Demand, TracePod


def _alternatives(request: dict[str, Any]) -> list[dict[str, Any]]:
    if "exactly" in request:
        return [request["exactly"]]
    return list(request.get("firstAvailable") or [])


def _count(alternative: dict[str, Any]) -> int:
    # allocationMode All has no count; one device is the honest minimum for a bound.
    if alternative.get("allocationMode") == "All":
        return 1
    return int(alternative.get("count") or 1)


MIG_COMPUTE_SLICES = 7  # the most a GPU has (A100/H100/H200/B200): the smallest share per slice
_PROFILE = re.compile(r"""profile\s*==\s*["'](\d+)g\.(\d+)gb""")
_MINIMUM = re.compile(r"""\.(memory|cores)\.compareTo\(quantity\(["']([^"']+)["']\)\)\s*>=\s*0""")


def _selector_text(alt: dict[str, Any]) -> str:
    return " ".join(str((s.get("cel") or {}).get("expression", "")) for s in alt.get("selectors") or [])


def _minimums(alt: dict[str, Any]) -> dict[str, float]:
    """The memory / cores a selector asks each device to have at least (compareTo(quantity(..)) >= 0)."""
    out: dict[str, float] = {}
    for what, amount in _MINIMUM.findall(_selector_text(alt)):
        out[what] = max(out.get(what, 0.0), float(quantity_of(amount).value))
    return out


def _sized(alt: dict[str, Any], split_count: int) -> Demand | None:
    """One device of the alternative, or None when its size cannot be told."""
    asked = (alt.get("capacity") or {}).get("requests") or {}
    if asked:
        return Demand(math.ceil(quantity_of(asked.get("memory", 0)).value),
                      float(quantity_of(asked.get("cores", 0)).value))
    cls = alt.get("deviceClassName")
    if cls == names.CLASS_MIG:
        profile = _PROFILE.search(_selector_text(alt))
        if profile:
            g, gb = int(profile.group(1)), int(profile.group(2))
            return Demand(gb * 10**9, 100.0 * g / MIG_COMPUTE_SLICES)
        return Demand(math.ceil(_minimums(alt).get("memory", 0)), 100.0 / MIG_COMPUTE_SLICES)
    if cls == names.CLASS_SLOT:
        least = _minimums(alt)
        if least:
            return Demand(math.ceil(least.get("memory", 0)), least.get("cores", 0.0))
        return Demand(0, 100.0 / split_count)
    return None


def request_demand(request: dict[str, Any], split_count: int = 10) -> Demand:
    alternatives = _alternatives(request)
    for alt in alternatives:
        one = _sized(alt, split_count)
        if one is not None:
            n = _count(alt)
            return Demand(memory=one.memory * n, cores=one.cores * n)
    whole = next((a for a in alternatives if a.get("deviceClassName") != names.CLASS_TIMESLICE),
                 alternatives[0] if alternatives else {})
    n = _count(whole) if whole else 1
    return Demand(memory=math.ceil(_minimums(whole).get("memory", 0)) * n if whole else 0, cores=100.0 * n)


def claim_demand(spec: dict[str, Any]) -> Demand:
    total = Demand()
    for request in (spec.get("devices") or {}).get("requests") or []:
        total = total + request_demand(request)
    return total


def pod_demand(pod: TracePod) -> Demand:
    if pod.demand is not None:
        return pod.demand
    total = Demand()
    for spec in pod.claims:
        total = total + claim_demand(spec)
    return total


def lower_bound_gpus(pods: Iterable[TracePod], gpu_memory: int) -> int:
    """Peak over time of max(ceil(memory / gpu_memory), ceil(cores / 100)) over the pods present.

    A pod is present from its arrival for its duration, as the trace intends (not as a strategy managed
    to schedule it), so the bound is the same for every strategy. At one instant departures count
    before arrivals, as in the event loop. `gpu_memory` is the largest GPU's memory: the most optimistic
    choice, which keeps this a bound.
    """
    events: list[tuple[float, int, Demand]] = []
    for pod in pods:
        d = pod_demand(pod)
        events.append((pod.arrival, 1, d))
        events.append((pod.arrival + pod.duration, 0, d))
    events.sort(key=lambda e: (e[0], e[1]))
    memory = 0
    # Cores in millipercent, as integers, so sums of 30 + 30 + 40 are exactly 100.
    millicores = 0
    peak = 0
    for _, arriving, d in events:
        sign = 1 if arriving else -1
        memory += sign * d.memory
        millicores += sign * math.floor(d.cores * 1000 + 1e-6)  # floor: a bound never rounds up
        if arriving:
            need = max(-(-memory // gpu_memory) if gpu_memory else 0, -(-millicores // 100_000))
            peak = max(peak, need)
    return peak
