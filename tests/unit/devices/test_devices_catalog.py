"""The emulated-model catalog (test and simulation data) agrees with the reference MIG table."""

from __future__ import annotations

import pytest
from devices_reference import mig_reference

from driver.devices import ModelError
from driver.devices.catalog import fake_gpu, fake_node, models, parse_fake_spec

REFERENCE = mig_reference()


def test_catalog_has_the_models_the_fake_library_emulates():
    assert {"T4", "L4", "A10", "A30", "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "B200"} <= set(
        models()
    )


@pytest.mark.parametrize("model", sorted(REFERENCE))
def test_catalog_mig_profiles_match_the_reference(model):
    gpu = fake_gpu(model)
    ref = REFERENCE[model]
    assert {p.name for p in gpu.mig_profiles} == set(ref["profiles"])
    for p in gpu.mig_profiles:
        assert [[x.start, x.size] for x in p.placements] == ref["profiles"][p.name]["placements"]
        assert p.max_instances == ref["profiles"][p.name]["max_instances"]
        assert p.compute_slices == ref["profiles"][p.name]["compute_slices"]
        assert p.memory_bytes <= gpu.memory_bytes and p.multiprocessors <= gpu.multiprocessors
    assert gpu.memory_slice_count == ref["memory_slices"]


def test_every_mig_capable_model_is_compared_with_the_reference():
    mig_models = {key for key in models() if fake_gpu(key).mig_capable}
    assert mig_models == set(REFERENCE)


def test_non_mig_models_have_no_profiles():
    for key in ("T4", "L4", "A10"):
        gpu = fake_gpu(key)
        assert not gpu.mig_capable and not gpu.mig_profiles


def test_fake_node_is_deterministic_per_node_and_distinct_across_nodes():
    a, b = fake_node("2xA100-80GB,1xT4", "n1"), fake_node("2xA100-80GB,1xT4", "n1")
    assert a == b
    assert [g.index for g in a] == [0, 1, 2] and [g.product for g in a][-1] == "Tesla T4"
    assert len({g.uuid for g in a}) == 3
    assert {g.uuid for g in a}.isdisjoint(g.uuid for g in fake_node("2xA100-80GB,1xT4", "n2"))


def test_fake_spec_accepts_counts_case_and_bare_models():
    assert parse_fake_spec("2xa100-80gb, T4") == ["A100-80GB", "A100-80GB", "T4"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("2xA100-80G", "unknown GPU model 'A100-80G'"),
        ("0xT4", "count must be at least 1"),
        ("T4,,L4", "empty item"),
    ],
)
def test_bad_fake_specs_name_the_token(spec, message):
    with pytest.raises(ModelError, match=message):
        parse_fake_spec(spec)
