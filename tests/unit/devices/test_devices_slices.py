"""ResourceSlices: API schema (kubernetes-validate --strict) and limits, every model x strategy x version."""

from __future__ import annotations

import kubernetes_validate
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.devices import LIMITS, STRATEGIES, ModelError, Settings, build_slices, limits_for, validate_slices
from driver.devices.catalog import fake_gpu, fake_node, models
from driver.devices.slices import slice_name

VERSIONS = ["1.34", "1.35", "1.36", "1.37", "1.38"]
MIG_MODELS = [m for m in models() if fake_gpu(m).mig_capable]


def strategies_for(model: str) -> list[str]:
    return [s for s in STRATEGIES if s != "mig" or model in MIG_MODELS]


def all_devices(slices):
    return [d for s in slices for d in s["spec"].get("devices", [])]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("model", models())
def test_slices_pass_kubernetes_validate_strict_for_every_strategy(model, version):
    for strategy in strategies_for(model):
        gpus = [fake_gpu(model, i, "node-a") for i in range(2)]
        slices = build_slices("node-a", gpus, {0: strategy, 1: strategy}, k8s_version=version)
        validate_slices(slices, limits_for(version))
        # kubernetes-validate has no 1.38 schemas yet; 1.38's ResourceSlice is 1.37's (v1.38.0-beta.0).
        schema = "1.37" if version == "1.38" else version
        for s in slices:
            kubernetes_validate.validate(s, f"{schema}.0", strict=True)


def test_mixed_node_slices_name_pool_and_count():
    gpus = fake_node("2xA100-80GB,1xT4", "n1")
    slices = build_slices("n1", gpus, {0: "mig", 1: "soft", 2: "exclusive"}, k8s_version="1.34", generation=7)
    assert [s["metadata"]["name"] for s in slices] == [
        f"n1-gpu.carve.dev-{k:03d}" for k in range(len(slices))
    ]
    for s in slices:
        assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
        assert s["spec"]["driver"] == "gpu.carve.dev"
        assert s["spec"]["nodeName"] == "n1"
        assert s["spec"]["pool"] == {"name": "n1", "generation": 7, "resourceSliceCount": len(slices)}
    names = [d["name"] for d in all_devices(slices)]
    assert "gpu-0" in names and "gpu-1" in names and "gpu-2" in names
    assert "gpu-0-mig-7g80gb-0" in names


def test_on_1_34_counters_share_the_slice_of_their_devices():
    gpus = fake_node("4xA100-80GB", "n1")
    slices = build_slices("n1", gpus, {i: "mig" for i in range(4)}, k8s_version="1.34")
    for s in slices:
        sets = {cs["name"] for cs in s["spec"].get("sharedCounters", [])}
        used = {c["counterSet"] for d in s["spec"]["devices"] for c in d.get("consumesCounters", [])}
        assert used == sets
        assert sum(len(cs["counters"]) for cs in s["spec"]["sharedCounters"]) <= 32
    assert len(slices) == 2  # 12 counters per A100: two GPUs per slice


def test_from_1_35_counters_live_in_their_own_slices_first():
    gpus = fake_node("9xA100-80GB", "n1")
    slices = build_slices("n1", gpus, {i: "mig" for i in range(9)}, k8s_version="1.35")
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 1]
    assert slices[:2] == counter_slices
    for s in slices:
        assert not ("devices" in s["spec"] and "sharedCounters" in s["spec"])
        assert len(s["spec"].get("devices", [])) <= 64


def test_slices_preserve_device_order_and_count():
    gpus = fake_node("3xH100-80GB,2xL4", "n1")
    strategies = {0: "mig", 1: "slots", 2: "soft", 3: "slots", 4: "timeslice"}
    split = Settings(split_count=50, soft_context_reserve=0)  # 50 reserves would not fit an L4
    expected = [
        d["name"]
        for g in gpus
        for d in build_slices("x", [g], {g.index: strategies[g.index]}, split)[0]["spec"]["devices"]
    ]
    for version in VERSIONS:
        slices = build_slices("n1", gpus, strategies, split, k8s_version=version)
        assert [d["name"] for d in all_devices(slices)] == expected


def test_many_slots_spill_over_slices():
    gpus = fake_node("3xT4", "n1")
    slices = build_slices(
        "n1", gpus, {i: "slots" for i in range(3)}, Settings(split_count=100, soft_context_reserve=0)
    )
    assert [len(s["spec"]["devices"]) for s in slices] == [100, 100, 100]
    one = build_slices("n1", fake_node("1xT4", "n1"), {0: "exclusive"})
    assert len(one) == 1


def test_node_without_gpus_publishes_an_empty_pool():
    (s,) = build_slices("n1", [], {})
    assert "devices" not in s["spec"] and s["spec"]["pool"]["resourceSliceCount"] == 1
    kubernetes_validate.validate(s, "1.34.0", strict=True)


def test_long_node_names_still_give_valid_slice_names():
    node = ".".join(["a" * 60] * 4)  # 243 characters
    names = {slice_name(node, k) for k in range(3)}
    assert len(names) == 3 and all(len(n) <= 253 for n in names)
    build_slices(node, fake_node("1xT4", node), {0: "exclusive"})


@pytest.mark.parametrize("node", ["", "N1", "n1_a", "-n1", "a" * 254])
def test_node_names_that_cannot_name_a_pool_are_errors(node):
    with pytest.raises(ModelError, match=r"node name .*: not a DNS subdomain"):
        build_slices(node, fake_node("1xT4"), {0: "exclusive"})


def test_negative_generation_is_an_error():
    with pytest.raises(ModelError, match="pool generation -1: must not be negative"):
        build_slices("n1", fake_node("1xT4"), {0: "exclusive"}, generation=-1)


def test_unknown_kubernetes_version_is_an_error():
    with pytest.raises(ModelError, match=r"unsupported Kubernetes version '1\.30'"):
        build_slices("n1", fake_node("1xT4"), {0: "exclusive"}, k8s_version="1.30")
    assert limits_for("v1.35.2") is LIMITS["1.35"]


@settings(max_examples=60, deadline=None)
@given(
    spec=st.lists(st.sampled_from(models()), min_size=0, max_size=16),
    strategy_choice=st.lists(st.sampled_from(sorted(STRATEGIES)), min_size=16, max_size=16),
    split_count=st.integers(min_value=1, max_value=100),
    version=st.sampled_from(VERSIONS),
)
def test_slices_never_exceed_limits(spec, strategy_choice, split_count, version):
    gpus = [fake_gpu(m, i, "n1") for i, m in enumerate(spec)]
    strategies = {
        g.index: (s if s != "mig" or g.mig_capable else "soft")
        for g, s in zip(gpus, strategy_choice, strict=False)
    }
    settings = Settings(split_count=split_count, soft_context_reserve=0)  # limits, not memory, are tested
    slices = build_slices("n1", gpus, strategies, settings, k8s_version=version)
    limits = limits_for(version)
    validate_slices(slices, limits)
    devices = all_devices(slices)
    assert len({d["name"] for d in devices}) == len(devices)
    for s in slices:
        n = len(s["spec"].get("devices", []))
        consumers = any(d.get("consumesCounters") for d in s["spec"].get("devices", []))
        assert n <= (limits.max_devices_with_counters_or_taints if consumers else limits.max_devices)
        for d in s["spec"].get("devices", []):
            assert len(d.get("attributes", {})) + len(d.get("capacity", {})) <= 32
    expected = sum(
        {"slots": split_count}.get(strategies[g.index], 1)
        if strategies[g.index] != "mig"
        else 1 + sum(len(p.placements) for p in g.mig_profiles)
        for g in gpus
    )
    assert len(devices) == expected


def test_a_slice_filled_exactly_to_its_device_cap_is_not_split():
    # 2 x 64 slots is exactly the 128 devices one slice may hold: one slice, not two.
    cap = limits_for("1.34").max_devices
    slices = build_slices("n1", fake_node("2xT4", "n1"), {0: "slots", 1: "slots"},
                          Settings(split_count=cap // 2, soft_context_reserve=0), k8s_version="1.34")
    assert [len(s["spec"]["devices"]) for s in slices] == [cap]
    # and one device more than the cap spills the last GPU's slots into a second slice
    over = build_slices("n1", fake_node("3xT4", "n1"), {0: "slots", 1: "slots", 2: "exclusive"},
                        Settings(split_count=cap // 2, soft_context_reserve=0), k8s_version="1.34")
    assert [len(s["spec"]["devices"]) for s in over] == [cap, 1]


def test_on_1_34_time_sliced_gpus_carry_no_bookkeeping_capacity_and_still_take_sharers() -> None:
    # 1.34's scheduler checks a shared device's capacity on the slice's first device (kubernetes#133705):
    # with `slots`/`memory` every share would count against GPU 0 of the slice. There the device is
    # published shared and without capacity (what the 1.34 check passes); 1.35+ keeps the bounds.
    from driver.allocator import Allocator
    from driver.simulate.cluster import device_classes

    gpus = fake_node("2xA100-80GB", "n")
    by_version = {}
    for version in ("1.34", "1.35", "1.37"):
        slices = build_slices("n", gpus, {0: "timeslice", 1: "timeslice"}, k8s_version=version)
        devices = [d for s in slices for d in s["spec"].get("devices") or []]
        assert all(d["allowMultipleAllocations"] for d in devices)
        by_version[version] = {d["name"]: sorted(d.get("capacity") or {}) for d in devices}
    assert by_version["1.34"] == {"gpu-0": [], "gpu-1": []}
    bounded = {"gpu-0": ["memory", "slots"], "gpu-1": ["memory", "slots"]}
    assert by_version["1.35"] == by_version["1.37"] == bounded
    # A claim that asks for no capacity is allocated any number of times on 1.34 (no bound there).
    allocator = Allocator(build_slices("n", gpus, {0: "timeslice", 1: "timeslice"}, k8s_version="1.34"),
                          device_classes())
    for k in range(12):
        claim = {"metadata": {"name": f"c{k}", "namespace": "ns", "uid": f"u{k}"},
                 "spec": {"devices": {"requests": [{"name": "g", "exactly": {
                     "deviceClassName": "timeslice.carve.dev"}}]}}}
        allocation = allocator.allocate(claim, node="n")
        allocator.add_allocated({**claim, "status": {"allocation": allocation}})
        assert allocation["devices"]["results"][0]["device"] == "gpu-0"
