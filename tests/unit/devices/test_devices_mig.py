"""MIG as partitionable devices: one device per NVML placement, exclusion by counter arithmetic."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from fractions import Fraction
from itertools import combinations

import pytest
from devices_reference import mig_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.devices import devices_for
from driver.devices.attributes import parse_quantity
from driver.devices.catalog import fake_gpu
from driver.devices.mig import profile_slug

REFERENCE = mig_reference()
MIG_MODELS = sorted(REFERENCE)


def mig_set(model: str):
    return devices_for(fake_gpu(model, 0, "n1"), "mig")


def fits(devices, counter_sets) -> bool:
    """Counter arithmetic as the scheduler does it: the chosen devices' consumption within every counter."""
    used: Counter[tuple[str, str]] = Counter()
    for d in devices:
        for c in d["consumesCounters"]:
            for name, amount in c["counters"].items():
                used[(c["counterSet"], name)] += parse_quantity(amount["value"])
    available = {
        (cs["name"], name): parse_quantity(v["value"])
        for cs in counter_sets
        for name, v in cs["counters"].items()
    }
    return all(amount <= available[key] for key, amount in used.items())


def hardware_valid(model: str, devices) -> bool:
    """What NVML accepts, by the reference table: disjoint memory slices, compute slices and per-profile
    instance counts within the GPU's."""
    ref = REFERENCE[model]
    taken: set[int] = set()
    compute = 0
    per_profile: Counter[str] = Counter()
    for d in devices:
        start, size = d["attributes"]["placementStart"]["int"], d["attributes"]["placementSize"]["int"]
        slices = set(range(start, start + size))
        if slices & taken:
            return False
        taken |= slices
        profile = d["attributes"]["profile"]["string"]
        per_profile[profile] += 1
        compute += ref["profiles"][profile]["compute_slices"]
    return compute <= ref["compute_slices"] and all(
        n <= ref["profiles"][p]["max_instances"] for p, n in per_profile.items()
    )


def mig_devices(ds):
    return [d for d in ds.devices if d["attributes"]["type"]["string"] == "mig"]


@pytest.mark.parametrize("model", MIG_MODELS)
def test_one_mig_device_per_reference_placement(model):
    devices = mig_devices(mig_set(model))
    expected = {
        (profile_slug(name), start)
        for name, p in REFERENCE[model]["profiles"].items()
        for start, _size in p["placements"]
    }
    got = [(d["attributes"]["profile"]["string"], d["attributes"]["placementStart"]["int"]) for d in devices]
    assert len(got) == len(expected) == len(set(got))
    assert {(profile_slug(p), s) for p, s in got} == expected


@pytest.mark.parametrize("model", MIG_MODELS)
def test_overlapping_mig_placements_conflict(model):
    ds = mig_set(model)
    devices = mig_devices(ds)
    checked = 0
    for a, b in combinations(devices, 2):
        sa, za = a["attributes"]["placementStart"]["int"], a["attributes"]["placementSize"]["int"]
        sb, zb = b["attributes"]["placementStart"]["int"], b["attributes"]["placementSize"]["int"]
        if sa < sb + zb and sb < sa + za:
            assert not fits([a, b], ds.counter_sets), (a["name"], b["name"])
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("model", MIG_MODELS)
def test_whole_gpu_conflicts_with_every_mig_device(model):
    ds = mig_set(model)
    (whole,) = [d for d in ds.devices if d["name"] == "gpu-0"]
    assert fits([whole], ds.counter_sets)
    for d in mig_devices(ds):
        assert fits([d], ds.counter_sets)
        assert not fits([whole, d], ds.counter_sets), d["name"]


@pytest.mark.parametrize("model", MIG_MODELS)
def test_whole_gpu_consumes_every_counter_in_full(model):
    ds = mig_set(model)
    (whole,) = [d for d in ds.devices if d["name"] == "gpu-0"]
    (cs,) = ds.counter_sets
    assert whole["consumesCounters"] == [{"counterSet": cs["name"], "counters": cs["counters"]}]


def _valid_combinations(model, devices):
    """Every set of placements the hardware accepts (depth-first, pruned on the first violation)."""
    out = []

    def walk(i, chosen):
        out.append(list(chosen))
        for j in range(i, len(devices)):
            chosen.append(devices[j])
            if hardware_valid(model, chosen):
                walk(j + 1, chosen)
            chosen.pop()

    walk(0, [])
    return out


@pytest.mark.parametrize("model", MIG_MODELS)
def test_every_configuration_the_hardware_accepts_fits_the_counters(model):
    ds = mig_set(model)
    combos = _valid_combinations(model, mig_devices(ds))
    assert len(combos) > len(mig_devices(ds))
    for combo in combos:
        assert fits(combo, ds.counter_sets), [d["name"] for d in combo]


@settings(max_examples=150, deadline=None)
@given(model=st.sampled_from(MIG_MODELS), data=st.data())
def test_counters_never_admit_what_the_hardware_refuses(model, data):
    ds = mig_set(model)
    devices = mig_devices(ds)
    chosen = data.draw(st.lists(st.sampled_from(devices), unique_by=lambda d: d["name"], max_size=8))
    if fits(chosen, ds.counter_sets):
        assert hardware_valid(model, chosen)


def test_plus_me_profiles_are_named_without_dots_and_plus_signs():
    names = {d["name"] for d in mig_devices(mig_set("A100-80GB"))}
    assert "gpu-0-mig-1g10gb-3" in names
    assert "gpu-0-mig-1g10gbme-0" in names
    rtx = {d["name"] for d in mig_devices(mig_set("RTX-PRO-6000"))}
    assert {"gpu-0-mig-1g24gbmeall-0", "gpu-0-mig-1g24gb-me-0", "gpu-0-mig-1g24gbgfx-3"} <= rtx


def test_only_one_plus_me_instance_fits():
    ds = mig_set("A100-80GB")
    me = [d for d in mig_devices(ds) if d["attributes"]["profile"]["string"] == "1g.10gb+me"]
    assert len(me) == 7
    assert not fits(me[:2], ds.counter_sets)


def test_mig_devices_capacity_is_the_profile():
    ds = mig_set("A100-40GB")
    (d,) = [d for d in mig_devices(ds) if d["name"] == "gpu-0-mig-3g20gb-4"]
    assert parse_quantity(d["capacity"]["memory"]["value"]) == 19968 * 1024**2
    assert d["capacity"]["multiprocessors"]["value"] == "42"
    assert d["attributes"]["placementStart"] == {"int": 4}
    assert d["attributes"]["parentUUID"] == {"string": ds.gpu.uuid}


def first_fit(devices, counter_sets, allocated, profile):
    """The scheduler's choice for one request of `profile`: the first device in order that still fits."""
    for d in devices:
        same = d["attributes"]["profile"]["string"] == profile
        if same and d not in allocated and fits([*allocated, d], counter_sets):
            return d
    return None


def test_placement_order_keeps_large_profiles_allocatable_under_first_fit():
    ds = mig_set("A100-80GB")
    devices = mig_devices(ds)
    allocated = []
    for _ in range(3):  # three small instances first...
        allocated.append(first_fit(devices, ds.counter_sets, allocated, "1g.10gb"))
    assert [d["attributes"]["placementStart"]["int"] for d in allocated] == [6, 5, 4]
    # ...still leave room for the 4g (slices 0-3), which slice-0-first packing would have destroyed.
    four = first_fit(devices, ds.counter_sets, allocated, "4g.40gb")
    assert four is not None and four["attributes"]["placementStart"]["int"] == 0
    naive = sorted(devices, key=lambda d: d["attributes"]["placementStart"]["int"])
    naive_alloc = []
    for _ in range(3):
        naive_alloc.append(first_fit(naive, ds.counter_sets, naive_alloc, "1g.10gb"))
    assert first_fit(naive, ds.counter_sets, naive_alloc, "4g.40gb") is None


def test_counter_values_are_the_gpu_totals():
    ds = mig_set("A100-80GB")
    (cs,) = ds.counter_sets
    assert cs["name"] == "gpu-0-counters"
    counters = cs["counters"]
    assert parse_quantity(counters["memory"]["value"]) == 80 * 1024**3
    assert counters["multiprocessors"]["value"] == "108"
    assert counters["compute-slices"]["value"] == "7"
    assert [k for k in counters if k.startswith("memory-slice-")] == [f"memory-slice-{i}" for i in range(8)]
    assert sum(Fraction(1) for k in counters if k.startswith("profile-")) == 1  # only 1g.10gb+me is limited


def test_devices_go_smallest_profile_first_whatever_order_nvml_lists_them():
    # First-fit takes the first device that satisfies a request: the smallest instance must come first.
    # NVML's profile order is not a contract, so the list is reversed here.
    gpu = fake_gpu("A100-80GB", 0, "n1")
    reordered = replace(gpu, mig_profiles=tuple(reversed(gpu.mig_profiles)))
    devices = devices_for(reordered, "mig").devices
    order = list(dict.fromkeys(d["attributes"]["profile"]["string"] for d in devices[:-1]))
    assert order == ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert devices[-1]["attributes"]["type"]["string"] == "gpu"


def test_a_layout_keeps_only_its_profiles_at_its_placements() -> None:
    from driver.devices.mig import within_layout

    full = mig_set("A100-80GB")
    got = within_layout(full, [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", None)])
    names_ = [d["name"] for d in got.devices]
    # 1g.10gb at every placement (in the full set's order), 3g.40gb at 4 and 2g.20gb at 0 only; no whole GPU.
    assert names_ == [d["name"] for d in full.devices if "-mig-1g10gb-" in d["name"]] + [
        "gpu-0-mig-2g20gb-0",
        "gpu-0-mig-3g40gb-4",
    ]
    assert "gpu-0" not in names_ and got.counter_sets == full.counter_sets
    # What is kept is exactly what the full set publishes for those devices (attributes, counters).
    assert all(d in full.devices for d in got.devices)


def test_a_layout_of_placements_nvml_does_not_have_keeps_nothing_and_other_strategies_refuse() -> None:
    from driver.devices.base import ModelError
    from driver.devices.mig import within_layout

    assert within_layout(mig_set("A100-80GB"), [("3g.40gb", 2)]).devices == ()
    with pytest.raises(ModelError, match="strategy mig only"):
        within_layout(devices_for(fake_gpu("A100-80GB", 0, "n1"), "soft"), [("3g.40gb", 0)])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_layout_is_a_subset_whose_every_device_has_a_slot(data) -> None:
    from driver.devices.mig import within_layout

    model = data.draw(st.sampled_from(MIG_MODELS))
    full = mig_set(model)
    gpu = full.gpu
    slots = data.draw(
        st.lists(
            st.sampled_from(
                [(p.name, pl.start) for p in gpu.mig_profiles for pl in p.placements]
                + [(p.name, None) for p in gpu.mig_profiles]
            ),
            max_size=7,
        )
    )
    got = within_layout(full, slots)
    assert all(d in full.devices for d in got.devices)
    for d in full.devices:
        a = d["attributes"]
        if "profile" not in a:
            assert d not in got.devices
            continue
        wanted = any(
            p == a["profile"]["string"] and at in (None, a["placementStart"]["int"]) for p, at in slots
        )
        assert (d in got.devices) == wanted
