"""The controller's Prometheus metrics, in a registry of its own (served by driver.metrics.exporter's
MetricsServer on --metrics-addr)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from api.v1alpha1.partitioning import STRATEGY_NAMES
from driver.controller.planner import DEFERRED, FITS, HELPED, UNFIT, YOUNG

PENDING_REASONS = (FITS, HELPED, YOUNG, UNFIT, DEFERRED)

PLAN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.plans = Counter("carve_controller_plans", "Planner runs.", registry=r)
        self.changes = Counter(
            "carve_controller_changes",
            "GPU strategy changes written to NodePartitionings, by new strategy.",
            ["strategy"],
            registry=r,
        )
        self.pending = Gauge(
            "carve_controller_pending_claims",
            "Pending claims at the last plan, by reason: fits (the scheduler will place "
            "it), helped (a change was made for it), young (within the grace period), "
            "unfit (no allowed change makes it fit), deferred (the plan made --max-changes "
            "changes before it).",
            ["reason"],
            registry=r,
        )
        self.plan_seconds = Histogram(
            "carve_controller_plan_duration_seconds",
            "Planner time per run.",
            buckets=PLAN_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            "carve_controller_leader", "1 while this replica holds the leader Lease.", registry=r
        )
        self.write_errors = Counter(
            "carve_controller_write_errors",
            "NodePartitioning writes that failed (retried at the next plan).",
            registry=r,
        )
        # Every label value exported at 0 from the start (Prometheus practice): a strategy's first change
        # must show in increase(), which needs a sample before it, and a quiet controller's panels show 0,
        # not nothing.
        for strategy in STRATEGY_NAMES:
            self.changes.labels(strategy=strategy)
        for reason in PENDING_REASONS:
            self.pending.labels(reason=reason).set(0)

    def observe_plan(self, seconds: float, pending: dict[str, int]) -> None:
        self.plans.inc()
        self.plan_seconds.observe(seconds)
        for reason in PENDING_REASONS:
            self.pending.labels(reason=reason).set(pending.get(reason, 0))
