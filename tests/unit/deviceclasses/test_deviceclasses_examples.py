"""Each example's claim, turned from its template into a claim, allocates what its comment promises.

The node (one pool, slices from the real device model) has a target for every example:
  gpu-0 T4 exclusive      (15 GiB, compute capability 7.5: ruled out by the whole-GPU example)
  gpu-1 H100-80GB exclusive
  gpu-2 A100-80GB mig
  gpu-3 A100-80GB soft
  gpu-4 A100-80GB soft
  gpu-5 T4 slots          (10 slots)
  gpu-6 L4 timeslice
The allocator is first fit in slice order (GPU index order here), so the expected device is the first
one that matches; the reasons are spelled out per test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from driver.allocator import Unallocatable, allocate
from driver.devices import build_slices
from driver.devices.catalog import fake_gpu

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "deviceclasses" / "examples"
NODE = "mixed-node"
LAYOUT = [
    ("T4", "exclusive"),
    ("H100-80GB", "exclusive"),
    ("A100-80GB", "mig"),
    ("A100-80GB", "soft"),
    ("A100-80GB", "soft"),
    ("T4", "slots"),
    ("L4", "timeslice"),
]


def _classes() -> list[dict]:
    return [
        d
        for path in sorted((REPO / "deviceclasses").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
    ]


def _slices(layout: list[tuple[str, str]], k8s_version: str) -> list[dict]:
    gpus = [fake_gpu(model, i, NODE) for i, (model, _) in enumerate(layout)]
    return build_slices(NODE, gpus, {i: s for i, (_, s) in enumerate(layout)}, k8s_version=k8s_version)


def _claim(example: str) -> dict:
    """The ResourceClaim the control plane would create from the example's template."""
    docs = list(yaml.safe_load_all((EXAMPLES / example).read_text()))
    (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    name = template["metadata"]["name"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-claim", "namespace": "default", "uid": f"uid-{name}"},
        "spec": template["spec"]["spec"],
    }


def _results(example: str, layout: list[tuple[str, str]] = LAYOUT, k8s_version: str = "1.36") -> list[dict]:
    allocation = allocate(_claim(example), _slices(layout, k8s_version), _classes(), node=NODE)
    return allocation["devices"]["results"]


def _devices(results: list[dict]) -> list[tuple[str, str]]:
    return [(r["request"], r["device"]) for r in results]


def test_soft_slice_takes_4gi_and_30_percent_of_the_first_soft_gpu() -> None:
    results = _results("soft-slice.yaml")
    assert _devices(results) == [("gpu", "gpu-3")]
    consumed = results[0]["consumedCapacity"]
    assert consumed["memory"] == "4Gi"
    assert consumed["cores"] == "30"
    assert results[0].get("shareID")


def test_mig_1g10gb_takes_the_top_placement() -> None:
    # The device model lists 1g placements top-down (6 first) to keep big aligned blocks free.
    assert _devices(_results("mig-1g10gb.yaml")) == [("gpu", "gpu-2-mig-1g10gb-6")]


def test_mig_at_least_20gi_skips_the_19_5gib_profiles() -> None:
    # NVML's 1g.20gb and 2g.20gb hold 19.5 GiB on an A100-80GB, below 20Gi; the smallest instance with
    # 20Gi or more is 3g.40gb, whose top placement (start 4) comes first.
    assert _devices(_results("mig-at-least-20gi.yaml")) == [("gpu", "gpu-2-mig-3g40gb-4")]


def test_whole_gpu_example_skips_the_t4_and_takes_the_h100() -> None:
    # gpu-0 (T4) fails both memory (15 GiB) and compute capability (7.5); gpu-1 (H100, 9.0) matches.
    assert _devices(_results("whole-gpu-40gi-sm80.yaml")) == [("gpu", "gpu-1")]


def test_whole_gpu_example_bounds_are_inclusive() -> None:
    # An A100-40GB has exactly 40 GiB and compute capability 8.0: both comparisons must include equality.
    layout = [("T4", "exclusive"), ("A100-40GB", "exclusive")]
    assert _devices(_results("whole-gpu-40gi-sm80.yaml", layout)) == [("gpu", "gpu-1")]


def test_whole_gpu_example_rejects_gpus_below_either_bound() -> None:
    # L4: compute capability 8.9 but 22.5 GiB; T4: neither.
    with pytest.raises(Unallocatable):
        _results("whole-gpu-40gi-sm80.yaml", [("T4", "exclusive"), ("L4", "exclusive")])


def test_three_slots_come_from_one_gpu() -> None:
    assert _devices(_results("three-slots.yaml")) == [
        ("gpu", "gpu-5-slot-0"), ("gpu", "gpu-5-slot-1"), ("gpu", "gpu-5-slot-2")]


def test_three_slots_skip_a_gpu_with_only_two_free_slots() -> None:
    # Two T4s in slots mode with 8 of gpu-0's 10 slots taken: the constraint forbids 2 + 1 across GPUs.
    layout = [("T4", "slots"), ("T4", "slots")]
    slices = _slices(layout, "1.34")
    taken = {
        "metadata": {"name": "other", "namespace": "default", "uid": "uid-other"},
        "spec": {"devices": {"requests": [
            {"name": "r", "exactly": {"deviceClassName": "slot.carve.dev", "count": 8}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "gpu.carve.dev", "pool": NODE, "device": f"gpu-0-slot-{k}"}
            for k in range(8)]}}},
    }
    allocation = allocate(_claim("three-slots.yaml"), slices, _classes(), allocated=[taken], node=NODE)
    assert [r["device"] for r in allocation["devices"]["results"]] == [
        "gpu-1-slot-0", "gpu-1-slot-1", "gpu-1-slot-2"]


def test_mig_or_soft_prefers_the_mig_instance() -> None:
    assert _devices(_results("mig-or-soft.yaml")) == [("gpu/mig", "gpu-2-mig-1g10gb-6")]


def test_mig_or_soft_falls_back_to_a_10gi_soft_slice_without_mig() -> None:
    layout = [("L4", "soft"), ("A100-80GB", "soft")]
    results = _results("mig-or-soft.yaml", layout)
    assert _devices(results) == [("gpu/soft", "gpu-0")]
    assert results[0]["consumedCapacity"]["memory"] == "10Gi"


def test_two_soft_slices_land_on_two_gpus() -> None:
    results = _results("two-soft-distinct-gpus.yaml")
    assert _devices(results) == [("gpu", "gpu-3"), ("gpu", "gpu-4")]


def test_two_soft_slices_do_not_fit_on_a_single_soft_gpu() -> None:
    layout = [("A100-80GB", "soft"), ("H100-80GB", "exclusive")]
    with pytest.raises(Unallocatable):
        _results("two-soft-distinct-gpus.yaml", layout)


def test_timeslice_claim_takes_the_time_sliced_gpu() -> None:
    assert _devices(_results("timeslice-shared.yaml")) == [("gpu", "gpu-6")]


@pytest.mark.parametrize("example", ["mig-1g10gb.yaml", "three-slots.yaml", "timeslice-shared.yaml",
                                     "whole-gpu-40gi-sm80.yaml"])
def test_examples_without_consumable_capacity_allocate_on_1_34_slices(example: str) -> None:
    # 1.34 keeps counter sets next to their devices; the examples must not depend on 1.36 slice layout.
    assert _results(example, k8s_version="1.34")
