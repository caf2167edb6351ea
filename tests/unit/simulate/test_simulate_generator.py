"""The built-in trace generator: deterministic, API-valid claims, runnable under every strategy."""

from __future__ import annotations

import json
from collections import Counter

import kubernetes_validate
import pytest
from support.simulate_cluster import nodes

from driver.simulate.generator import generate, slot_counts
from driver.simulate.inputs import GenerateModel


def test_same_seed_gives_the_same_trace() -> None:
    assert generate(GenerateModel(pods=200, seed=3)) == generate(GenerateModel(pods=200, seed=3))


def test_another_seed_gives_another_trace() -> None:
    assert generate(GenerateModel(pods=200, seed=3)) != generate(GenerateModel(pods=200, seed=4))


def test_simulation_of_a_seeded_trace_is_deterministic(run) -> None:
    pods = generate(GenerateModel(pods=40, seed=11, interarrival_s=120))
    cluster = [nodes("a", 1, "8xA100-80GB")]
    first, second = run(cluster, pods), run(cluster, pods)
    assert first.report() == second.report()
    assert first.placements == second.placements


def test_inference_mix_has_the_documented_shares() -> None:
    kinds = Counter(p.kind for p in generate(GenerateModel(pods=4000, seed=1)))
    assert kinds["inference"] / 4000 == pytest.approx(0.60, abs=0.03)
    assert kinds["notebook"] / 4000 == pytest.approx(0.25, abs=0.03)
    assert kinds["training"] / 4000 == pytest.approx(0.15, abs=0.03)


def test_arrivals_are_ordered_with_the_requested_mean_gap() -> None:
    pods = generate(GenerateModel(pods=4000, seed=2, interarrival_s=45))
    arrivals = [p.arrival for p in pods]
    assert arrivals == sorted(arrivals)
    assert arrivals[-1] / len(pods) == pytest.approx(45, rel=0.05)


def test_single_kind_generators_only_make_that_kind() -> None:
    for kind in ("inference", "notebook", "training"):
        assert {p.kind for p in generate(GenerateModel(kind=kind, pods=50, seed=0))} == {kind}


@pytest.mark.parametrize("version", ["1.34.0", "1.36.0"])
def test_every_generated_claim_is_a_valid_resource_claim(version: str) -> None:
    pods = generate(GenerateModel(pods=600, seed=5))
    shapes = {json.dumps(c, sort_keys=True) for p in pods for c in p.claims}
    assert len(shapes) > 5
    for shape in shapes:
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "c", "namespace": "default"}, "spec": json.loads(shape)}
        kubernetes_validate.validate(claim, version, strict=True)


def test_slot_counts_start_from_the_cores_share() -> None:
    assert slot_counts(4, 10, 10) == [1, 2, 3, 5]
    assert slot_counts(24, 50, 10) == [5, 6, 7, 9]
    assert slot_counts(8, 100, 10) == [10]


@pytest.mark.parametrize("strategy", ["exclusive", "mig", "soft", "slots", "timeslice"])
def test_generated_trace_schedules_every_pod_under_every_strategy(run, strategy: str) -> None:
    # One roomy 8-GPU node (8-GPU training jobs need one) and a slow trickle: everything must fit.
    pods = generate(GenerateModel(pods=30, seed=9, interarrival_s=900))
    result = run([nodes("a", 1, "8xA100-80GB")], pods, strategy=strategy)
    assert result.pods_never_scheduled == 0, result.never_fit_reasons
    assert result.pods_scheduled == 30
    assert result.gpus_by_strategy == {strategy: 8}


def test_slots_cannot_serve_a_training_job_of_more_than_three_gpus(run) -> None:
    # A claim holds at most 32 devices, so 4 GPUs' worth of 10-slot GPUs (40 slots) cannot be asked for:
    # documented in docs/simulate.md as a limit of the slots strategy, and explained on stderr.
    pods = [p for p in generate(GenerateModel(kind="training", pods=40, seed=1)) if p.demand.cores >= 400][:1]
    assert pods
    pods = [pods[0].__class__(pods[0].name, 0, 10, pods[0].claims, pods[0].demand)]
    assert run([nodes("a", 1, "8xA100-80GB")], pods, strategy="slots").pods_never_fit == 1
    assert run([nodes("a", 1, "8xA100-80GB")], pods, strategy="soft").pods_scheduled == 1
