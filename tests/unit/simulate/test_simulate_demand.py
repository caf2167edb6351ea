"""Pod demand and the lower bound: arithmetic worked out by hand."""

from __future__ import annotations

from conftest import pod, soft, soft_or_whole, whole_gpus

from driver.simulate.demand import lower_bound_gpus, pod_demand
from driver.simulate.inputs import Demand, TracePod

GI = 1024**3


def test_demand_comes_from_capacity_requests() -> None:
    assert pod_demand(pod("p", 0, 1, soft("4Gi", "30"))) == Demand(4 * GI, 30.0)


def test_demand_of_first_available_is_its_first_sized_alternative() -> None:
    assert pod_demand(pod("p", 0, 1, soft_or_whole("10Gi", "20"))) == Demand(10 * GI, 20.0)


def test_unsized_request_counts_as_whole_devices() -> None:
    assert pod_demand(pod("p", 0, 1, whole_gpus(3))) == Demand(0, 300.0)


def test_demand_sums_over_claims_and_counts() -> None:
    two = {"devices": {"requests": [{"name": "g", "exactly": {
        "deviceClassName": "vgpu.carve.dev", "count": 2,
        "capacity": {"requests": {"memory": "1Gi", "cores": "5"}}}}]}}
    assert pod_demand(pod("p", 0, 1, two, soft("2Gi", "10"))) == Demand(4 * GI, 20.0)


def test_explicit_demand_wins() -> None:
    p = TracePod("p", 0, 1, (whole_gpus(),), demand=Demand(GI, 7.0))
    assert pod_demand(p) == Demand(GI, 7.0)


def test_lower_bound_takes_the_larger_of_memory_and_cores() -> None:
    # 3 x 30 GiB on 80 GiB GPUs -> ceil(90/80) = 2 by memory; 3 x 10% -> 1 by cores.
    pods = [pod(f"m{i}", 0, 10, soft("30Gi", "10")) for i in range(3)]
    assert lower_bound_gpus(pods, 80 * GI) == 2
    # 3 x 45% -> ceil(135/100) = 2 by cores; 3 x 1 GiB -> 1 by memory.
    pods = [pod(f"c{i}", 0, 10, soft("1Gi", "45")) for i in range(3)]
    assert lower_bound_gpus(pods, 80 * GI) == 2


def test_lower_bound_is_the_peak_over_time() -> None:
    # 60% during 0..10, then 60% + 60% during 5..10 -> 2; after 10 only the third (60%) -> 1.
    pods = [pod("a", 0, 10, soft("1Gi", "60")), pod("b", 5, 5, soft("1Gi", "60")),
            pod("c", 20, 5, soft("1Gi", "60"))]
    assert lower_bound_gpus(pods, 80 * GI) == 2


def test_lower_bound_counts_a_departure_before_an_arrival_at_the_same_instant() -> None:
    pods = [pod("a", 0, 10, soft("1Gi", "60")), pod("b", 10, 10, soft("1Gi", "60"))]
    assert lower_bound_gpus(pods, 80 * GI) == 1


def test_lower_bound_sums_cores_exactly() -> None:
    # 30 + 30 + 40 is exactly 100 (not 100.00000000000001 -> 2).
    pods = [pod("a", 0, 10, soft("1Gi", "30")), pod("b", 0, 10, soft("1Gi", "30")),
            pod("c", 0, 10, soft("1Gi", "40"))]
    assert lower_bound_gpus(pods, 80 * GI) == 1
