"""Seeded synthetic traces: inference services, notebooks and training jobs.

Every generated claim runs under every strategy: its requests use `firstAvailable` with one alternative
per device class, in the order a platform team would prefer them (hardware isolation, then a sized soft
share, then slots, then time-slicing, then a whole GPU). On a node of one strategy only the alternatives
of that strategy's class can match, so the same trace measures each strategy.

The mixes (a synthesis of public descriptions of shared inference clusters, not a measured trace):
- inference: a model server, 4-24 GiB and 10-50% of a GPU, runs for hours (median ~1.5 h);
- notebook: 4-8 GiB and 5-10%, mostly idle, long-lived (2-10 h);
- training: 1, 2, 4 or 8 whole GPUs for 20 min to a day (median ~3 h).
`inference-mix` draws 60% inference, 25% notebooks, 15% training. Arrivals are a Poisson process with
the given mean gap. Same (kind, pods, seed, interarrival_s) -> the same trace, on any machine.
"""

from __future__ import annotations

import math
import random
from typing import Any

from driver import names
from driver.devices import Settings
from driver.simulate.inputs import Demand, GenerateModel, TracePod

GI = 1024**3
DOMAIN = names.DRIVER_NAME
MIX = {"inference": 0.60, "notebook": 0.25, "training": 0.15}
# (memory GiB, cores %, weight): a few common model-server sizes.
INFERENCE_SIZES = ((4, 10, 3), (8, 20, 4), (12, 25, 2), (16, 30, 3), (20, 40, 2), (24, 50, 1))
NOTEBOOK_SIZES = ((4, 5, 2), (6, 10, 2), (8, 10, 1))
TRAINING_GPUS = ((1, 4), (2, 3), (4, 2), (8, 1))
MAX_RESULTS = 32  # resource.k8s.io/v1: devices one claim may be allocated


def _at_least(what: str, amount: str) -> str:
    return f'device.capacity["{DOMAIN}"].{what}.compareTo(quantity("{amount}")) >= 0'


def _sel(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


def slot_counts(memory_gib: int, cores: int, split_count: int) -> list[int]:
    """How many slots to try, fewest first. Cores set the minimum on every GPU (a slot has 100/N
    percent); memory per slot depends on the GPU, so larger counts follow for smaller GPUs."""
    per_slot = max(1, 100 // split_count)
    k0 = max(1, -(-cores // per_slot))
    return sorted({min(split_count, k) for k in (k0, k0 + 1, k0 + 2, k0 + 4)})


def small_claim(memory_gib: int, cores: int, split_count: int = 10, request: str = "gpu") -> dict[str, Any]:
    """A share of one GPU: `memory_gib` GiB and `cores` percent, under whatever the node offers."""
    memory = f"{memory_gib}Gi"
    alternatives: list[dict[str, Any]] = [
        {"name": "mig", "deviceClassName": names.CLASS_MIG, "selectors": _sel(_at_least("memory", memory))},
        {"name": "soft", "deviceClassName": names.CLASS_VGPU,
         "capacity": {"requests": {"memory": memory, "cores": str(cores)}}},
    ]
    constraints = []
    for k in slot_counts(memory_gib, cores, split_count):
        # k slots of one GPU that together hold the share: each slot needs 1/k of it (rounded up).
        per_mem = f"{math.ceil(memory_gib * 1024 / k)}Mi"
        per_cores = str(math.ceil(cores / k))
        alternatives.append({
            "name": f"slots{k}", "deviceClassName": names.CLASS_SLOT, "count": k,
            "selectors": _sel(f"{_at_least('memory', per_mem)} && {_at_least('cores', per_cores)}"),
        })
        if k > 1:
            constraints.append({"requests": [f"{request}/slots{k}"],
                                "matchAttribute": f"{DOMAIN}/parentUUID"})
    alternatives += [
        {"name": "timeslice", "deviceClassName": names.CLASS_TIMESLICE},
        {"name": "gpu", "deviceClassName": names.CLASS_GPU, "selectors": _sel(_at_least("memory", memory))},
    ]
    devices: dict[str, Any] = {"requests": [{"name": request, "firstAvailable": alternatives}]}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def whole_gpus_claim(count: int, memory_gib: int, split_count: int) -> dict[str, Any]:
    """`count` whole GPUs for training, under whatever the node offers.

    One request with a count, not one request per GPU: the allocator tries devices of one request in
    increasing order (combinations) but restarts every request from the first device (permutations), so
    on a nearly full node `count` separate requests cost up to count! attempts before failing.
    Slots stand in for a GPU only when that fits the 32 results a claim may hold; a one-GPU job takes
    all slots of one GPU (matchAttribute parentUUID), a bigger one count x split_count slots anywhere
    on the node.
    """
    request = "gpus"
    memory = f"{memory_gib}Gi"
    alternatives: list[dict[str, Any]] = [
        {"name": "gpu", "deviceClassName": names.CLASS_GPU, "count": count,
         "selectors": _sel(_at_least("memory", memory))},
        # All of a soft GPU's compute, memory as the job needs it; 100% cores keeps two apart.
        {"name": "soft", "deviceClassName": names.CLASS_VGPU, "count": count,
         "capacity": {"requests": {"memory": memory, "cores": "100"}}},
    ]
    constraints: list[dict[str, Any]] = []
    if count * split_count <= MAX_RESULTS:
        alternatives.append({"name": "slots", "deviceClassName": names.CLASS_SLOT,
                             "count": count * split_count})
        if count == 1:
            constraints.append({"requests": [f"{request}/slots"], "matchAttribute": f"{DOMAIN}/parentUUID"})
    alternatives.append({"name": "timeslice", "deviceClassName": names.CLASS_TIMESLICE, "count": count})
    if count > 1:
        constraints.append({"requests": [f"{request}/timeslice"], "distinctAttribute": f"{DOMAIN}/uuid"})
    devices: dict[str, Any] = {"requests": [{"name": request, "firstAvailable": alternatives}]}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def _weighted(rng: random.Random, table: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    row = rng.choices(table, weights=[r[-1] for r in table])[0]
    return row[:-1]


def _lognormal_s(rng: random.Random, median_s: float, sigma: float, low: float, high: float) -> float:
    return float(round(min(high, max(low, rng.lognormvariate(math.log(median_s), sigma)))))


def _pod(rng: random.Random, kind: str, n: int, arrival: float, split_count: int) -> TracePod:
    if kind == "inference":
        mem, cores = _weighted(rng, INFERENCE_SIZES)
        duration = _lognormal_s(rng, 5400, 0.8, 600, 12 * 3600)
        return TracePod(f"inference-{n}", arrival, duration, (small_claim(mem, cores, split_count),),
                        Demand(mem * GI, float(cores)), kind)
    if kind == "notebook":
        mem, cores = _weighted(rng, NOTEBOOK_SIZES)
        duration = float(rng.randrange(2 * 3600, 10 * 3600, 60))
        return TracePod(f"notebook-{n}", arrival, duration, (small_claim(mem, cores, split_count),),
                        Demand(mem * GI, float(cores)), kind)
    (gpus,) = _weighted(rng, TRAINING_GPUS)
    mem = rng.choice((12, 14))  # fits the smallest emulated GPU (T4, 15 GiB), so any node can train
    duration = _lognormal_s(rng, 3 * 3600, 0.9, 1200, 24 * 3600)
    return TracePod(f"training-{n}", arrival, duration, (whole_gpus_claim(gpus, mem, split_count),),
                    Demand(gpus * mem * GI, 100.0 * gpus), kind)


def generate(spec: GenerateModel, settings: Settings | None = None) -> list[TracePod]:
    """The pods of a generated trace, in arrival order."""
    split_count = (settings or Settings()).split_count
    rng = random.Random(f"{spec.kind}/{spec.seed}")
    kinds = list(MIX) if spec.kind == "inference-mix" else [spec.kind]
    weights = [MIX[k] for k in kinds]
    pods: list[TracePod] = []
    t = 0.0
    for n in range(spec.pods):
        t += rng.expovariate(1.0 / spec.interarrival_s)
        kind = rng.choices(kinds, weights=weights)[0]
        pods.append(_pod(rng, kind, n, round(t, 1), split_count))
    return pods
