"""The MIG reference the tests compare the device model with: native/fakes/mig-profiles.json.

That file is the project's committed copy of shared/reference/mig-profiles.json (the fake NVML's tables
are generated from it). Tests read it here, keyed by carve's emulated-model keys, instead of keeping a
third copy. Only what the tests compare is extracted: placements, instance limits, slice counts.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

REFERENCE_FILE = Path(__file__).resolve().parents[3] / "native" / "fakes" / "mig-profiles.json"

# carve model key -> the reference's GPU key (the same pairs as `mig_table` in native/fakes/common/models.c).
MODEL_KEYS = {
    "A30": "A30-24GB",
    "A100-40GB": "A100-40GB",
    "A100-80GB": "A100-80GB",
    "H100-80GB": "H100-80GB",
    "H100-NVL": "H100-NVL-94GB",
    "H200-141GB": "H200-141GB",
    "B200": "B200-180GB",
    "RTX-PRO-6000": "RTX-PRO-6000-Blackwell-96GB",
}


def _extract(gpu: dict[str, Any]) -> dict[str, Any]:
    return {
        "memory_slices": gpu["placement_units"],
        "compute_slices": gpu["compute_slices"],
        "profiles": {
            p["name"]: {
                "placements": [[x["start"], x["size"]] for x in p["placements"]],
                "max_instances": p["max_instances"],
                "compute_slices": p["compute_slices"],
            }
            for p in gpu["gpu_instance_profiles"]
        },
    }


@cache
def mig_reference() -> dict[str, dict[str, Any]]:
    """{model key: {memory_slices, compute_slices, profiles: {name: {placements, max_instances,
    compute_slices}}}} for every MIG-capable emulated model."""
    gpus = json.loads(REFERENCE_FILE.read_text(encoding="utf-8"))["gpus"]
    return {model: _extract(gpus[ref_key]) for model, ref_key in MODEL_KEYS.items()}
