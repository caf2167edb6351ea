"""The device model per strategy: names, attributes, capacities, request policies, errors."""

from __future__ import annotations

from fractions import Fraction

import pytest

from driver.devices import STRATEGIES, ModelError, Settings, devices_for, parse_strategy_spec
from driver.devices.attributes import parse_quantity, quantity, semver
from driver.devices.catalog import fake_gpu, fake_node

GI = 1024**3
MI = 1024**2


def q(text: str) -> Fraction:
    return parse_quantity(text)


def test_exclusive_is_one_whole_gpu_device_with_full_capacity():
    gpu = fake_gpu("A100-80GB", 3, "n1")
    (device,) = devices_for(gpu, "exclusive").devices
    assert device["name"] == "gpu-3"
    assert device["capacity"]["memory"]["value"] == "80Gi"
    assert device["capacity"]["multiprocessors"]["value"] == "108"
    assert device["capacity"]["cores"]["value"] == "100"
    assert "allowMultipleAllocations" not in device
    assert device["attributes"]["type"] == {"string": "gpu"}


def test_every_device_carries_the_common_attributes():
    gpu = fake_gpu("H100-80GB", 1, "n1")
    for strategy in STRATEGIES:
        for device in devices_for(gpu, strategy).devices:
            attrs = device["attributes"]
            assert attrs["uuid"] == {"string": gpu.uuid}
            assert attrs["parentUUID"] == {"string": gpu.uuid}
            assert attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
            assert attrs["architecture"] == {"string": "hopper"}
            assert attrs["cudaComputeCapability"] == {"version": "9.0.0"}
            assert attrs["driverVersion"] == {"version": "580.95.5"}
            assert attrs["migCapable"] == {"bool": True}
            assert attrs["index"] == {"int": 1}
            assert attrs["resource.kubernetes.io/pciBusID"] == {"string": gpu.pci_bus_id}


def test_versions_become_semver_without_leading_zeros():
    assert semver("8.0") == "8.0.0"
    assert semver("580.95.05") == "580.95.5"
    assert semver("13") == "13.0.0"
    with pytest.raises(ModelError, match="not a dotted version"):
        semver("r580-beta")


def test_quantities_use_exact_binary_suffixes_only():
    assert quantity(80 * GI) == "80Gi"
    assert quantity(81559 * MI) == "81559Mi"
    assert quantity(100) == "100"
    assert quantity(1000) == "1000"
    assert q(quantity(123456789)) == 123456789


def test_soft_device_is_shared_with_consumable_memory_cores_and_slots():
    gpu = fake_gpu("A100-80GB", 0)
    (device,) = devices_for(gpu, "soft", Settings(split_count=8)).devices
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"]["type"] == {"string": "vgpu"}
    memory = device["capacity"]["memory"]
    assert memory["value"] == "76Gi"  # 80Gi less 8 shares x 512Mi of CUDA context the limiter cannot count
    assert memory["requestPolicy"]["validRange"] == {"min": "256Mi", "max": "76Gi", "step": "256Mi"}
    assert memory["requestPolicy"]["default"] == "9728Mi"  # 76Gi / 8 = 9.5Gi
    cores = device["capacity"]["cores"]
    assert cores["value"] == "100"
    assert cores["requestPolicy"] == {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}}
    assert device["capacity"]["slots"] == {
        "value": "8",
        "requestPolicy": {"default": "1", "validValues": ["1"]},
    }


def test_soft_memory_policy_is_aligned_to_steps_when_memory_is_not():
    gpu = fake_gpu("H100-80GB", 0)  # 81559Mi: not a multiple of 256Mi
    policy = devices_for(gpu, "soft", Settings(split_count=3)).devices[0]["capacity"]["memory"][
        "requestPolicy"
    ]
    step, lo, hi = q("256Mi"), q(policy["validRange"]["min"]), q(policy["validRange"]["max"])
    default = q(policy["default"])
    shared = 81559 * MI - 3 * Settings().soft_context_reserve
    assert hi <= shared < hi + step
    assert (hi - lo) % step == 0 and (default - lo) % step == 0
    assert default <= Fraction(shared, 3)


def test_slots_split_memory_and_cores_and_share_parent_uuid():
    gpu = fake_gpu("L4", 2, "n1")
    devices = devices_for(gpu, "slots", Settings(split_count=4)).devices
    assert [d["name"] for d in devices] == [f"gpu-2-slot-{k}" for k in range(4)]
    for d in devices:
        assert d["attributes"]["parentUUID"] == {"string": gpu.uuid}
        assert d["attributes"]["type"] == {"string": "slot"}
        assert q(d["capacity"]["memory"]["value"]) == (gpu.memory_bytes - 4 * 512 * MI) // 4
        assert d["capacity"]["cores"]["value"] == "25"
    assert sum(q(d["capacity"]["memory"]["value"]) for d in devices) <= gpu.memory_bytes


@pytest.mark.parametrize("strategy", ["soft", "slots"])
def test_every_share_keeps_room_for_its_cuda_context(strategy):
    # The limiter counts allocations, not the context each process creates: with every share taken and
    # every quota used, the GPU must still hold one context per share.
    gpu = fake_gpu("A100-80GB", 0)
    for reserve in (0, 300 * MI, 512 * MI, 1024 * MI):
        settings = Settings(split_count=7, soft_context_reserve=reserve)
        devices = devices_for(gpu, strategy, settings).devices
        if strategy == "soft":
            offered = q(devices[0]["capacity"]["memory"]["requestPolicy"]["validRange"]["max"])
        else:
            offered = sum(q(d["capacity"]["memory"]["value"]) for d in devices)
        assert offered + 7 * reserve <= gpu.memory_bytes
        assert offered + 7 * reserve > gpu.memory_bytes - 7 * MI - 256 * MI  # and not much more is held back


def test_a_reserve_that_leaves_no_memory_is_an_error_naming_the_gpu():
    with pytest.raises(ModelError, match=r"gpu-0 \(Tesla T4\): soft: .*soft context reserve"):
        devices_for(fake_gpu("T4", 0), "soft", Settings(split_count=30, soft_context_reserve=512 * MI))
    with pytest.raises(ModelError, match=r"settings\.soft_context_reserve"):
        Settings(soft_context_reserve=-1)


def test_timeslice_bounds_sharers_and_memory_but_reserves_no_compute():
    """Up to split-count sharers and the GPU's shareable memory (bookkeeping, not a quota); no cores."""
    (device,) = devices_for(fake_gpu("T4", 0), "timeslice", Settings(split_count=4)).devices
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"]["type"] == {"string": "timeslice"}
    cap = device["capacity"]
    assert set(cap) == {"memory", "slots"}
    assert cap["slots"] == {"value": "4", "requestPolicy": {"default": "1", "validValues": ["1"]}}
    (soft,) = devices_for(fake_gpu("T4", 0), "soft", Settings(split_count=4)).devices
    assert cap["memory"] == soft["capacity"]["memory"]  # one memory rule for every shared device


def test_mig_on_a_gpu_without_mig_names_the_gpu():
    with pytest.raises(ModelError, match=r"gpu-2 \(Tesla T4\) has no MIG support"):
        devices_for(fake_gpu("T4", 2), "mig")


def test_unknown_strategy_lists_the_known_ones():
    with pytest.raises(
        ModelError, match="unknown strategy 'fastest'; one of exclusive, mig, mps, slots, soft, timeslice"
    ):
        devices_for(fake_gpu("T4", 0), "fastest")


def test_settings_reject_split_counts_outside_1_to_100():
    for bad in (0, 101):
        with pytest.raises(ModelError, match="split_count"):
            Settings(split_count=bad)


def test_strategy_spec_per_index_and_default():
    gpus = fake_node("2xA100-80GB,1xT4")
    assert parse_strategy_spec("0=mig,1=soft,2=exclusive", gpus) == {0: "mig", 1: "soft", 2: "exclusive"}
    assert parse_strategy_spec("soft", gpus) == {0: "soft", 1: "soft", 2: "soft"}
    assert parse_strategy_spec("0=mig,timeslice", gpus) == {0: "mig", 1: "timeslice", 2: "timeslice"}
    assert parse_strategy_spec("1=soft", gpus) == {0: "exclusive", 1: "soft", 2: "exclusive"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0=mig,1=turbo", "'1=turbo': unknown strategy 'turbo'"),
        ("0=mig,,1=soft", "empty item"),
        ("x;=mig", "'x;=mig': selector 'x;' is neither a GPU index nor a glob"),
        ("0=mig,0=soft", "'0=soft': GPU 0 named twice"),
        ("soft,mig", "'mig': a second default"),
        ("0mig", "'0mig': unknown strategy '0mig'"),
        ("", "is empty"),
    ],
)
def test_malformed_strategy_specs_name_the_bad_token(spec, message):
    with pytest.raises(ModelError, match=message.replace("(", r"\(")):
        parse_strategy_spec(spec, fake_node("2xA100-80GB,1xT4"))


def test_the_flags_default_is_the_model_default():
    from driver.devices.attributes import parse_quantity
    from driver.devices.base import DEFAULT_CONTEXT_RESERVE, DEFAULT_CONTEXT_RESERVE_QUANTITY

    reserve = Settings().soft_context_reserve
    assert parse_quantity(DEFAULT_CONTEXT_RESERVE_QUANTITY) == DEFAULT_CONTEXT_RESERVE == reserve
