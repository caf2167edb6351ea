"""Seeded random cases for the differential test: one node's GPUs under mixed strategies (carve's own
slice builder), and claims of every class with selectors, counts, capacity requests and constraints."""

from __future__ import annotations

import random
from dataclasses import dataclass

from driver import names
from driver.devices import build_slices
from driver.devices.catalog import fake_gpu

MODELS = ("T4", "L4", "A30", "A100-40GB", "A100-80GB", "H100-80GB")
MIG_CAPABLE = {"A30", "A100-40GB", "A100-80GB", "H100-80GB"}
PROFILES = ("1g.5gb", "1g.6gb", "1g.10gb", "2g.10gb", "2g.20gb", "3g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
ATTR = f'device.attributes["{names.DRIVER_NAME}"]'
CAP = f'device.capacity["{names.DRIVER_NAME}"]'


@dataclass
class Case:
    seed: int
    node: str
    slices: list[dict]
    claims: list[dict]
    layout: str  # e.g. "A100-80GB:mig,T4:soft" for messages


def _exactly(klass: str, **kw) -> dict:
    return {"deviceClassName": klass, **kw}


KINDS_OF = {
    "exclusive": ["whole"],
    "slots": ["slot", "slot-same-gpu"],
    "soft": ["soft", "first"],
    "mig": ["mig", "first", "whole"],
    "timeslice": ["timeslice"],
}


def _claim(rng: random.Random, name: str, gates_on: bool, present: set[str]) -> dict:
    kinds = ["whole", "slot", "slot-same-gpu"] + (["soft", "mig", "timeslice", "first"] if gates_on else [])
    # Mostly claims the node's strategies can serve (so allocations pile up), sometimes any.
    likely = [k for s in sorted(present) for k in KINDS_OF[s] if k in kinds]
    kind = rng.choice(likely if likely and rng.random() < 0.8 else kinds)
    constraints: list[dict] = []
    if kind == "whole":
        req = _exactly(names.CLASS_GPU, count=rng.choice([1, 1, 2]))
        if rng.random() < 0.5:
            gi = rng.choice([16, 24, 40, 80])
            req["selectors"] = [{"cel": {"expression": f'{CAP}.memory.compareTo(quantity("{gi}Gi")) >= 0'}}]
    elif kind in ("slot", "slot-same-gpu"):
        req = _exactly("slot.carve.dev", count=rng.choice([1, 2, 3, 5]))
        if kind == "slot-same-gpu":
            constraints = [{"requests": ["gpu"], "matchAttribute": f"{names.DRIVER_NAME}/uuid"}]
    elif kind == "soft":
        req = _exactly(
            names.CLASS_VGPU,
            capacity={
                "requests": {
                    "memory": f"{rng.choice([1, 4, 8, 16, 30, 40])}Gi",
                    "cores": str(rng.choice([0, 10, 30, 60])),
                }
            },
        )
        if rng.random() < 0.3:
            req["count"] = 2
            constraints = [{"requests": ["gpu"], "distinctAttribute": f"{names.DRIVER_NAME}/uuid"}]
    elif kind == "mig":
        profile = rng.choice(PROFILES)
        req = _exactly(
            "mig.carve.dev",
            selectors=[{"cel": {"expression": f'"profile" in {ATTR} && {ATTR}.profile == "{profile}"'}}],
        )
    elif kind == "timeslice":
        req = _exactly("timeslice.carve.dev")
    else:
        first = [
            {
                "name": "mig",
                "deviceClassName": "mig.carve.dev",
                "selectors": [
                    {
                        "cel": {
                            "expression": f'"profile" in {ATTR} && {ATTR}.profile == "{rng.choice(PROFILES)}"'
                        }
                    }
                ],
            },
            {
                "name": "soft",
                "deviceClassName": names.CLASS_VGPU,
                "capacity": {"requests": {"memory": f"{rng.choice([4, 10, 20])}Gi"}},
            },
        ]
        devices = {"requests": [{"name": "gpu", "firstAvailable": first}]}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": devices},
        }
    devices = {"requests": [{"name": "gpu", "exactly": req}]}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }


def case(seed: int, minor: str, gates_on: bool) -> Case:
    rng = random.Random(seed)
    node = f"diff-{seed}"
    strategies_all = ["exclusive", "slots"] + (["soft", "timeslice"] if gates_on else [])
    models = [rng.choice(MODELS) for _ in range(rng.randint(1, 3))]
    gpus = [fake_gpu(m, i, node) for i, m in enumerate(models)]
    chosen = {}
    for i, m in enumerate(models):
        options = strategies_all + (["mig"] if gates_on and m in MIG_CAPABLE else [])
        chosen[i] = rng.choice(options)
    slices = build_slices(node, gpus, chosen, k8s_version=minor)
    claims = [_claim(rng, f"c{k}", gates_on, set(chosen.values())) for k in range(rng.randint(2, 5))]
    layout = ",".join(f"{m}:{chosen[i]}" for i, m in enumerate(models))
    return Case(seed, node, slices, claims, layout)
