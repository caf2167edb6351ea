"""Pod demand and the lower bound: arithmetic worked out by hand."""

from __future__ import annotations

from support.simulate_cluster import pod, soft, soft_or_whole, whole_gpus

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


def _mig(selector: str) -> dict:
    return {"devices": {"requests": [{"name": "g", "exactly": {
        "deviceClassName": "mig.carve.dev", "selectors": [{"cel": {"expression": selector}}]}}]}}


def test_a_mig_profile_counts_its_compute_slices_and_memory() -> None:
    d = pod_demand(pod("p", 0, 1, _mig('device.attributes["gpu.carve.dev"].profile == "3g.40gb"')))
    assert d == Demand(40 * 10**9, 300 / 7)


def test_a_mig_request_sized_by_memory_counts_that_memory_and_one_compute_slice() -> None:
    sel = 'device.capacity["gpu.carve.dev"].memory.compareTo(quantity("8Gi")) >= 0'
    assert pod_demand(pod("p", 0, 1, _mig(sel))) == Demand(8 * GI, 100 / 7)


def test_slots_count_what_their_selectors_ask_of_each_slot_or_a_split_share() -> None:
    sel = ('device.capacity["gpu.carve.dev"].memory.compareTo(quantity("2Gi")) >= 0 && '
           'device.capacity["gpu.carve.dev"].cores.compareTo(quantity("10")) >= 0')
    sized = {"devices": {"requests": [{"name": "g", "exactly": {
        "deviceClassName": "slot.carve.dev", "count": 3, "selectors": [{"cel": {"expression": sel}}]}}]}}
    bare = {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "slot.carve.dev",
                                                               "count": 2}}]}}
    assert pod_demand(pod("p", 0, 1, sized)) == Demand(6 * GI, 30.0)
    assert pod_demand(pod("p", 0, 1, bare)) == Demand(0, 20.0)


def test_a_timesliced_alternative_is_passed_over_for_one_with_a_size() -> None:
    claim = {"devices": {"requests": [{"name": "g", "firstAvailable": [
        {"name": "t", "deviceClassName": "timeslice.carve.dev"},
        {"name": "s", "deviceClassName": "vgpu.carve.dev",
         "capacity": {"requests": {"memory": "2Gi", "cores": "15"}}}]}]}}
    assert pod_demand(pod("p", 0, 1, claim)) == Demand(2 * GI, 15.0)


def test_a_mig_only_trace_packs_at_ratio_one(run) -> None:
    # Seven 1g.10gb pods fill one A100's seven compute slices: the bound is one GPU, as is the peak
    # (before the fix each MIG instance counted as a whole GPU: bound 7, ratio 0.14).
    from support.simulate_cluster import nodes

    one = _mig('device.attributes["gpu.carve.dev"].profile == "1g.10gb"')
    result = run([nodes("n", 1, "2xA100-80GB", "mig")], [pod(f"m{i}", 0, 100, one) for i in range(7)],
                 strategy="mig")
    assert (result.pods_scheduled, result.peak_gpus_busy, result.lower_bound_gpus) == (7, 1, 1)
    assert result.packing_ratio == 1.0
