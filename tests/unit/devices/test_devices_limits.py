"""The limits validator catches every ResourceSlice limit and names the slice, device and limit."""

from __future__ import annotations

import copy

import pytest

from driver.devices import SliceLimitError, build_slices, limits_for, validate_slices
from driver.devices.catalog import fake_node

L134, L135 = limits_for("1.34"), limits_for("1.35")


def base(strategy: str = "exclusive", version: str = "1.34", spec: str = "1xA100-80GB"):
    gpus = fake_node(spec, "n1")
    return build_slices("n1", gpus, {g.index: strategy for g in gpus}, k8s_version=version)


def plain_device(i: int) -> dict:
    return {"name": f"dev-{i}", "attributes": {"type": {"string": "gpu"}}}


def expect(slices, limits, *fragments):
    with pytest.raises(SliceLimitError) as err:
        validate_slices(slices, limits)
    for f in fragments:
        assert f in str(err.value), str(err.value)


def test_valid_slices_pass():
    validate_slices(base("mig"), L134)
    validate_slices(base("mig", "1.35"), L135)


@pytest.mark.parametrize("generation", [-1, "1", None])
def test_generation_must_be_a_non_negative_integer(generation):
    slices = base()
    slices[0]["spec"]["pool"]["generation"] = generation
    expect(slices, L134, f"pool.generation {generation!r} is not an integer >= 0")


def test_more_than_128_devices():
    slices = base()
    slices[0]["spec"]["devices"] = [plain_device(i) for i in range(129)]
    expect(slices, L134, "129 devices, more than 128")


def test_more_than_64_devices_with_counters_on_1_35():
    slices = base("mig", "1.35", "4xA100-80GB")
    consumer = next(s for s in slices if "devices" in s["spec"])
    template = consumer["spec"]["devices"][0]
    consumer["spec"]["devices"] = [dict(copy.deepcopy(template), name=f"d-{i}") for i in range(65)]
    expect(slices, L135, "65 devices, more than 64 (devices consume counters or carry taints)")
    consumer["spec"]["devices"] = consumer["spec"]["devices"][:64]
    validate_slices(slices, L135)


def test_more_than_32_attributes_and_capacities():
    slices = base()
    device = slices[0]["spec"]["devices"][0]
    for i in range(30):
        device["attributes"][f"extra{i}"] = {"int": i}
    expect(slices, L134, "device 'gpu-0'", "attributes and capacities, more than 32")


def test_attribute_string_longer_than_64():
    slices = base()
    slices[0]["spec"]["devices"][0]["attributes"]["productName"] = {"string": "x" * 65}
    expect(slices, L134, "device 'gpu-0'", "'productName' value is longer than 64")


def test_version_attribute_must_be_semver():
    slices = base()
    slices[0]["spec"]["devices"][0]["attributes"]["driverVersion"] = {"version": "580.95.05"}
    expect(slices, L134, "'driverVersion' version '580.95.05' is not semver")


def test_attribute_must_hold_exactly_one_value():
    slices = base()
    slices[0]["spec"]["devices"][0]["attributes"]["index"] = {"int": 1, "string": "1"}
    expect(slices, L134, "'index' must have exactly one of")


def test_attribute_names_are_c_identifiers_of_at_most_32():
    slices = base()
    slices[0]["spec"]["devices"][0]["attributes"]["a" * 33] = {"int": 1}
    expect(slices, L134, "longer than 32")
    slices = base()
    slices[0]["spec"]["devices"][0]["attributes"]["bad-name"] = {"int": 1}
    expect(slices, L134, "'bad-name' is not a C identifier")


def test_attribute_domain_at_most_63():
    slices = base()
    slices[0]["spec"]["devices"][0]["attributes"][("d" * 64) + ".io/x"] = {"int": 1}
    expect(slices, L134, "domain of", "more than 63")


def test_driver_and_pool_name_lengths():
    slices = base()
    slices[0]["spec"]["driver"] = "a" * 64 + ".dev"
    expect(slices, L134, "driver name", "more than 63")
    slices = base()
    slices[0]["spec"]["pool"]["name"] = "p" * 254
    expect(slices, L134, "pool name must have 1..253")


def test_device_names_are_dns_labels_unique_in_the_pool():
    slices = base()
    slices[0]["spec"]["devices"][0]["name"] = "GPU_0"
    expect(slices, L134, "device name 'GPU_0' is not a valid name")
    slices = base("slots")
    slices[0]["spec"]["devices"][1]["name"] = slices[0]["spec"]["devices"][0]["name"]
    expect(slices, L134, "appears twice in the pool")


def test_resource_slice_count_must_match_the_pool():
    slices = base()
    slices[0]["spec"]["pool"]["resourceSliceCount"] = 2
    expect(slices, L134, "resourceSliceCount 2 does not match the 1 slices")


def test_shared_counters_at_most_32_per_slice_on_1_34():
    slices = base("mig")  # one A100 set of 12 counters
    extra = {"name": "extra", "counters": {f"c-{i}": {"value": "1"} for i in range(21)}}
    slices[0]["spec"]["sharedCounters"].append(extra)
    expect(slices, L134, "33 shared counters, more than 32")


def test_consumed_counters_at_most_32_per_device_on_1_34():
    slices = base("mig")
    whole = next(d for d in slices[0]["spec"]["devices"] if d["name"] == "gpu-0")
    n = len(whole["consumesCounters"][0]["counters"])  # 12 on an A100: 3 totals, 8 slices, 1 instance limit
    whole["consumesCounters"] = whole["consumesCounters"] * 3
    expect(slices, L134, "device 'gpu-0'", f"consumes {3 * n} counters, more than 32")


def test_consumed_counters_at_most_1024_per_slice_on_1_34():
    limits = limits_for("1.34")
    slices = base("mig")
    devices = slices[0]["spec"]["devices"]
    template = devices[-1]  # the whole GPU
    n = len(template["consumesCounters"][0]["counters"])
    copies = 1024 // n + 1  # just over the slice budget
    slices[0]["spec"]["devices"] = [dict(copy.deepcopy(template), name=f"w-{i}") for i in range(copies)]
    expect(slices, limits, f"devices consume {copies * n} counters, more than 1024")


def test_devices_and_counters_in_one_slice_on_1_35():
    slices = base("mig", "1.34")
    expect(slices, L135, "holds both devices and sharedCounters")


def test_at_most_8_counter_sets_per_slice_on_1_35():
    slices = base("mig", "1.35", "9xA100-80GB")
    first, second = slices[0], slices[1]
    first["spec"]["sharedCounters"] += second["spec"]["sharedCounters"]
    slices.remove(second)
    for s in slices:
        s["spec"]["pool"]["resourceSliceCount"] = len(slices)
    expect(slices, L135, "9 counter sets, more than 8")


def test_at_most_32_counters_per_set():
    slices = base("mig", "1.35")
    counters = slices[0]["spec"]["sharedCounters"][0]["counters"]
    for i in range(21):
        counters[f"extra-{i}"] = {"value": "1"}
    expect(slices, L135, "has 33 counters, more than 32")


def test_at_most_2_consumption_entries_per_device_on_1_35():
    slices = base("mig", "1.35")
    device = slices[1]["spec"]["devices"][0]
    device["consumesCounters"] = device["consumesCounters"] * 3
    expect(slices, L135, f"device {device['name']!r}", "3 consumesCounters entries, more than 2")


def test_counter_set_names_unique_in_the_pool():
    slices = base("mig", "1.35", "2xA100-80GB")
    sets = slices[0]["spec"]["sharedCounters"]
    sets[1] = dict(sets[1], name=sets[0]["name"])
    expect(slices, L135, "appears twice in the pool")


def test_consumed_counter_set_must_exist():
    slices = base("mig", "1.35")
    slices[1]["spec"]["devices"][0]["consumesCounters"][0]["counterSet"] = "gpu-9-counters"
    expect(slices, L135, "'gpu-9-counters', which is not in its pool")


def test_request_policy_needs_allow_multiple_allocations():
    slices = base("soft")
    del slices[0]["spec"]["devices"][0]["allowMultipleAllocations"]
    expect(slices, L134, "requestPolicy without allowMultipleAllocations")


def test_request_policy_default_must_be_on_a_step():
    slices = base("soft")
    slices[0]["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["default"] = "300Mi"
    expect(slices, L134, "capacity 'memory' requestPolicy", "default is not min plus a whole number of steps")


def test_request_policy_max_within_capacity():
    slices = base("soft")
    slices[0]["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["max"] = "100Gi"
    expect(slices, L134, "min <= default <= max <= capacity value")


def test_valid_values_must_contain_the_default():
    slices = base("soft")
    slices[0]["spec"]["devices"][0]["capacity"]["slots"]["requestPolicy"]["default"] = "2"
    expect(slices, L134, "default must be one of validValues")


def test_request_policy_step_must_be_positive():
    slices = base("soft")
    slices[0]["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] = "0"
    expect(slices, L134, "capacity 'memory' requestPolicy", "step must be greater than zero")


L137, L138 = limits_for("1.37"), limits_for("v1.38.0-beta.0")


def test_1_37_keeps_the_slice_limits_of_1_36():
    """v1.37.2's pkg/apis/resource/types.go has 1.36's constants; only new fields and gate stages differ."""
    for field in ("max_devices", "max_devices_with_counters_or_taints", "max_counter_sets_per_slice",
                  "max_consumptions_per_device", "max_counters_per_consumption", "max_counters_per_set",
                  "max_attributes_and_capacities", "max_taints_per_device", "taint_effects"):
        assert getattr(L137, field) == getattr(limits_for("1.36"), field), field
    assert L137.device_taints_default and L137.consumable_capacity_default
    assert L137.partitionable_devices_default
    assert not L137.compatibility_groups_default  # DRADeviceCompatibilityGroups is alpha in 1.37
    assert (L138.version, L138.max_compatibility_groups) == ("1.38", 2)


@pytest.mark.parametrize("version", ["1.37", "1.38"])
def test_slices_of_every_strategy_pass_on_1_37_and_1_38(version):
    for strategy in ("exclusive", "soft", "slots", "mig", "timeslice"):
        validate_slices(base(strategy, version, "2xA100-80GB"), limits_for(version))


def taint(**fields):
    return {"key": "gpu.carve.dev/unhealthy", "value": "xid-79", "effect": "NoSchedule", **fields}


def test_taints_per_device_4_on_1_34_and_16_later():
    slices = base()
    slices[0]["spec"]["devices"][0]["taints"] = [taint(key=f"gpu.carve.dev/t{i}") for i in range(5)]
    expect(slices, L134, "device 'gpu-0'", "5 taints, more than 4")
    validate_slices(slices, L137)
    slices[0]["spec"]["devices"][0]["taints"] = [taint(key=f"gpu.carve.dev/t{i}") for i in range(17)]
    expect(slices, L137, "17 taints, more than 16")


def test_taint_effect_none_only_from_1_35():
    slices = base()
    slices[0]["spec"]["devices"][0]["taints"] = [taint(effect="None")]
    expect(slices, L134, "taints[0]", "effect 'None' is not one of NoExecute, NoSchedule")
    validate_slices(slices, L135)
    slices[0]["spec"]["devices"][0]["taints"] = [taint(effect="NoPlace")]
    expect(slices, L137, "effect 'NoPlace' is not one of NoExecute, NoSchedule, None")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key": ""}, "key is missing"),
        ({"key": "gpu.carve.dev/" + "k" * 64}, "is not a label name"),
        ({"key": "Bad_Domain/x"}, "prefix of key 'Bad_Domain/x'"),
        ({"key": "gpu.carve.dev/-x"}, "is not a label name"),
        ({"value": "v" * 64}, "is not a label value"),
        ({"value": "bad value"}, "is not a label value"),
    ],
)
def test_taint_key_and_value_are_label_name_and_value(fields, message):
    slices = base()
    slices[0]["spec"]["devices"][0]["taints"] = [taint(**fields)]
    expect(slices, L137, "device 'gpu-0': taints[0]", message)


def mig_consumption(version):
    slices = base("mig", version)
    device = next(s for s in slices if s["spec"].get("devices"))["spec"]["devices"][0]
    return slices, device["consumesCounters"][0]


def test_compatibility_groups_exist_from_1_37():
    slices, consumption = mig_consumption("1.36")
    consumption["compatibilityGroups"] = ["mig"]
    expect(slices, limits_for("1.36"), "compatibilityGroups", "exists from Kubernetes 1.37")
    slices, consumption = mig_consumption("1.37")
    consumption["compatibilityGroups"] = ["mig", "soft"]
    validate_slices(slices, L137)


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        (["a", "b", "c"], "3 groups, more than 2"),
        (["mig", "mig"], "group names must be unique"),
        (["MIG"], "group name 'MIG' is not a valid name"),
    ],
)
def test_compatibility_groups_rules(groups, message):
    slices, consumption = mig_consumption("1.37")
    consumption["compatibilityGroups"] = groups
    expect(slices, L137, "compatibilityGroups", message)
