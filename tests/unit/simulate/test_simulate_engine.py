"""The event loop's rules, on traces small enough to work out by hand."""

from __future__ import annotations

import pytest
from support.simulate_cluster import nodes, pod, soft, soft_or_whole, whole_gpus


def test_pod_that_fits_no_node_is_never_scheduled(run) -> None:
    result = run([nodes("n", 1, "1xT4", "exclusive")], [pod("big", 0, 10, whole_gpus(2))])
    assert (result.pods_scheduled, result.pods_never_scheduled, result.pods_never_fit) == (0, 1, 1)
    assert result.peak_gpus_busy == 0
    assert list(result.never_fit_reasons) == ["big"]
    assert "request gpu needs 2 devices: 1 of 1 devices match class gpu.carve.dev" in \
        result.never_fit_reasons["big"]


def test_pods_with_the_same_claims_that_never_fit_point_to_the_first_one(run) -> None:
    trace = [pod("big", 0, 10, whole_gpus(2)), pod("big2", 5, 10, whole_gpus(2))]
    result = run([nodes("n", 1, "1xT4", "exclusive")], trace)
    assert (result.pods_never_scheduled, result.pods_never_fit) == (2, 2)
    first = result.never_fit_reasons["big"]
    assert result.never_fit_reasons["big2"] == f"same claims as pod big: {first}"


def test_pod_too_big_does_not_block_the_pods_behind_it(run) -> None:
    trace = [pod("big", 0, 10, whole_gpus(2)), pod("small", 1, 10)]
    result = run([nodes("n", 1, "1xT4", "exclusive")], trace)
    assert result.placements["small"].start == 1
    assert result.pods_never_scheduled == 1


def test_pod_waits_for_a_departure(run) -> None:
    # One GPU. a holds it 0..100; b arrives at 10 and starts when a leaves, then runs its 50 s.
    result = run([nodes("n", 1, "1xT4", "exclusive")], [pod("a", 0, 100), pod("b", 10, 50)])
    assert result.placements["b"].start == 100
    assert result.mean_wait_s == pytest.approx((0 + 90) / 2)
    assert result.max_wait_s == 90
    assert result.peak_gpus_busy == 1
    assert result.gpu_hours_busy == pytest.approx(150 / 3600)  # busy from 0 to 150 without a gap


def test_departure_frees_capacity_for_an_arrival_at_the_same_instant(run) -> None:
    result = run([nodes("n", 1, "1xT4", "exclusive")], [pod("a", 0, 100), pod("b", 100, 10)])
    assert result.placements["b"].start == 100
    assert result.mean_wait_s == 0


def test_waiting_pods_retry_oldest_first(run) -> None:
    trace = [pod("a", 0, 100), pod("b", 10, 10), pod("c", 20, 10)]
    result = run([nodes("n", 1, "1xT4", "exclusive")], trace)
    assert (result.placements["b"].start, result.placements["c"].start) == (100, 110)


def test_a_pod_whose_second_claim_fails_releases_its_first(run) -> None:
    # Two GPUs. a takes one (0..100). b needs two claims of one GPU each: it fits an empty node but not
    # now, so it waits, and must not keep the GPU its first claim got, or c could not start at 20.
    trace = [pod("a", 0, 100), pod("b", 10, 5, whole_gpus(), whole_gpus()), pod("c", 20, 100)]
    result = run([nodes("n", 1, "2xT4", "exclusive")], trace)
    assert result.placements["c"].start == 20
    # a leaves at 100 but c holds the other GPU until 120: only then do both of b's claims fit.
    assert result.placements["b"].start == 120
    assert sorted(result.placements["b"].devices) == ["gpu=gpu-0", "gpu=gpu-1"]


def test_kube_policy_spreads_and_binpack_fills_the_first_node(run) -> None:
    cluster = [nodes("a", 1, "2xT4", "exclusive"), nodes("b", 1, "2xT4", "exclusive")]
    trace = [pod("p1", 0, 100), pod("p2", 1, 100)]
    spread = run(cluster, trace, policy="kube")
    packed = run(cluster, trace, policy="binpack")
    assert (spread.placements["p1"].node, spread.placements["p2"].node) == ("a", "b")
    assert (packed.placements["p1"].node, packed.placements["p2"].node) == ("a", "a")


def test_binpack_keeps_a_whole_node_free_for_a_big_pod(run) -> None:
    # Two 2-GPU nodes; two 1-GPU pods, then a 2-GPU pod. Spreading leaves no node with 2 free GPUs.
    cluster = [nodes("a", 1, "2xT4", "exclusive"), nodes("b", 1, "2xT4", "exclusive")]
    trace = [pod("p1", 0, 100), pod("p2", 1, 100), pod("big", 2, 10, whole_gpus(2))]
    assert run(cluster, trace, policy="kube").placements["big"].start == 100
    assert run(cluster, trace, policy="binpack").placements["big"].start == 2


def test_soft_slices_share_a_gpu_until_its_cores_run_out(run) -> None:
    # 40% + 40% fit one soft GPU; a third 40% share does not and waits for the first to leave.
    trace = [pod(f"s{i}", i, 100, soft("4Gi", "40")) for i in range(3)]
    result = run([nodes("n", 1, "1xA100-80GB", "soft")], trace)
    assert [result.placements[f"s{i}"].start for i in range(3)] == [0, 1, 100]
    assert result.peak_gpus_busy == 1
    assert result.lower_bound_gpus == 2  # 120% of cores present at t=2


def test_forced_strategy_overrides_the_node_and_mig_falls_back_to_exclusive_without_mig(run) -> None:
    cluster = [nodes("a", 1, "1xA100-80GB", "soft"), nodes("t", 1, "1xT4")]
    result = run(cluster, [pod("p", 0, 10)], strategy="mig")
    assert result.gpus_by_strategy == {"exclusive": 1, "mig": 1}


def test_auto_starts_with_the_policy_default_keeps_named_strategies_and_changes_for_pods(run) -> None:
    # Soft (the default policy's default) where the node names none; the whole-GPU pod then makes the
    # planner switch one idle soft GPU to exclusive; the node that names `slots` is left alone.
    cluster = [nodes("a", 1, "1xA100-80GB"), nodes("t", 1, "1xT4"), nodes("x", 1, "1xL4", "slots")]
    result = run(cluster, [pod("p", 0, 10)], strategy="planner")
    assert result.gpus_by_strategy == {"exclusive": 1, "slots": 1, "soft": 1}
    assert result.strategy_changes == 1 and result.pods_scheduled == 1
    assert result.planner_runs and result.report()["planner_runs"] == result.planner_runs
    assert "planner_runs" not in run(cluster, [pod("p", 0, 10)], strategy="exclusive").report()


def test_packing_ratio_is_peak_over_lower_bound(run) -> None:
    # Two 10% pods: exclusive gives each a GPU, soft puts both on one; the demand fits one GPU either way.
    trace = [pod("a", 0, 100, soft_or_whole("4Gi", "10")), pod("b", 0, 100, soft_or_whole("4Gi", "10"))]
    exclusive = run([nodes("n", 1, "2xT4")], trace, strategy="exclusive")
    shared = run([nodes("n", 1, "2xT4")], trace, strategy="soft")
    assert (exclusive.peak_gpus_busy, exclusive.lower_bound_gpus, exclusive.packing_ratio) == (2, 1, 2.0)
    assert (shared.peak_gpus_busy, shared.lower_bound_gpus, shared.packing_ratio) == (1, 1, 1.0)


def test_reasons_are_worked_out_only_for_pods_that_fit_no_empty_node(run, monkeypatch) -> None:
    # Explaining a failure walks every device; the loop retries instead, so only the never-fits check
    # (once per claim shape) pays for it. Three pods wait for the one GPU, one never fits.
    import driver.allocator.allocator as allocator_module

    calls = []
    real = allocator_module.why
    monkeypatch.setattr(allocator_module, "why", lambda *a: calls.append(a[1].name) or real(*a))
    trace = [pod("a", 0, 100), pod("b", 1, 10), pod("c", 2, 10), pod("big", 3, 10, whole_gpus(2))]
    result = run([nodes("n", 1, "1xT4", "exclusive")], trace, strategy="planner")
    assert result.placements["c"].start == 110
    assert calls == ["simulate/big-0"]
    assert "needs 2 devices" in result.never_fit_reasons["big"]


def test_auto_returns_an_idle_gpu_to_the_default_after_min_hold(run) -> None:
    # The whole-GPU pod makes the planner switch the soft A100 to exclusive; when it leaves after the
    # 10 minute hold, consolidation turns it back to soft for the soft pod that comes later.
    trace = [pod("whole", 0, 700), pod("small", 800, 10, soft("4Gi", "20"))]
    result = run([nodes("a", 1, "1xA100-80GB")], trace, strategy="planner")
    assert result.strategy_changes == 2 and result.gpus_by_strategy == {"soft": 1}
    assert result.placements["small"].start == 800  # the GPU was soft again before it arrived
