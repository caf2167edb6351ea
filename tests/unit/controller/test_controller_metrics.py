"""The controller's series exist from the start: a strategy's first change is visible to increase() (it
needs a sample before the change) and a quiet controller's dashboard panels show 0, not nothing."""

from __future__ import annotations

from api.v1alpha1.partitioning import STRATEGY_NAMES
from driver.controller.metrics import PENDING_REASONS, ControllerMetrics


def test_changes_exist_at_zero_for_every_strategy_before_any_change():
    r = ControllerMetrics().registry
    for strategy in STRATEGY_NAMES:
        assert r.get_sample_value("carve_controller_changes_total", {"strategy": strategy}) == 0


def test_pending_claims_exist_at_zero_for_every_reason_before_the_first_plan():
    r = ControllerMetrics().registry
    assert set(PENDING_REASONS) == {"fits", "helped", "young", "unfit", "deferred"}
    for reason in PENDING_REASONS:
        assert r.get_sample_value("carve_controller_pending_claims", {"reason": reason}) == 0


def test_a_plan_sets_every_reason_and_a_change_counts_once():
    m = ControllerMetrics()
    m.observe_plan(0.01, {"unfit": 2})
    m.changes.labels(strategy="mig").inc()
    r = m.registry
    assert r.get_sample_value("carve_controller_pending_claims", {"reason": "unfit"}) == 2
    assert r.get_sample_value("carve_controller_pending_claims", {"reason": "fits"}) == 0
    assert r.get_sample_value("carve_controller_changes_total", {"strategy": "mig"}) == 1
    assert r.get_sample_value("carve_controller_changes_total", {"strategy": "soft"}) == 0
    assert r.get_sample_value("carve_controller_plans_total") == 1
