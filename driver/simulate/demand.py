"""What a pod needs, independent of how a strategy serves it: the input of the lower bound.

The lower bound must be the same for every strategy, so it cannot look at what the allocator handed out
(a whole GPU under `exclusive` says nothing about the need). A pod's demand is, in order:
  1. its `demand:` in the trace (the generator always writes one);
  2. else, per request, the first alternative (the `exactly` request or the first `firstAvailable`
     subrequest) that states `capacity.requests`: its memory and cores, times its count;
  3. else, a request with no stated size counts as whole devices: 100% cores per device, memory unknown (0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

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


def request_demand(request: dict[str, Any]) -> Demand:
    alternatives = _alternatives(request)
    for alt in alternatives:
        asked = (alt.get("capacity") or {}).get("requests") or {}
        if asked:
            n = _count(alt)
            memory = quantity_of(asked.get("memory", 0)).value
            cores = quantity_of(asked.get("cores", 0)).value
            return Demand(memory=math.ceil(memory) * n, cores=float(cores) * n)
    n = _count(alternatives[0]) if alternatives else 1
    return Demand(memory=0, cores=100.0 * n)


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
        millicores += sign * round(d.cores * 1000)
        if arriving:
            need = max(-(-memory // gpu_memory) if gpu_memory else 0, -(-millicores // 100_000))
            peak = max(peak, need)
    return peak
