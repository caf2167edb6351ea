"""Prometheus metrics of the legacy scheduler extender, served at GET /metrics on its own --addr.

HAMi's scheduler exported its filter/bind latency and errors; users moving from it keep them here under
carve's names: request duration per verb (histogram), errors by a fixed kind, and the assignments it
made (successful binds, each recorded in a ConfigMap). Labels are bounded: the verb is one of three, the
kind one of four; no pod or node names (those are in the records and the log).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from driver.metrics.exporter import build_info

VERBS = ("filter", "prioritize", "bind")
# bad_request: 400/404/413 (the caller's); internal: 500 (ours); refused: the verb answered with an Error
# (bind failed, no node fits for a reason the pod must fix); none: not an error (not counted).
ERROR_KINDS = ("bad_request", "internal", "refused")
# The scheduler calls filter for every pod and node list; most take well under a millisecond.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ExtenderMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        build_info(r, "scheduler-extender")
        self.duration = Histogram(
            "carve_extender_request_duration_seconds",
            "Time to answer a filter, prioritize or bind call.",
            ["verb"],
            buckets=BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "carve_extender_errors",
            "Calls that ended in an error, by verb and kind (bad_request, internal, refused).",
            ["verb", "kind"],
            registry=r,
        )
        self.assignments = Counter(
            "carve_extender_assignments",
            "Pods bound with a GPU assignment (its record written, the Binding created).",
            registry=r,
        )
        for verb in VERBS:  # every series exists from the start, so rate() and alerts see zeros
            self.duration.labels(verb)
            for kind in ERROR_KINDS:
                self.errors.labels(verb, kind)

    def observe(self, verb: str, seconds: float, kind: str = "") -> None:
        """One call: its duration, and its error kind ('' = none)."""
        if verb not in VERBS:
            return
        self.duration.labels(verb).observe(seconds)
        if kind:
            self.errors.labels(verb, kind).inc()
        elif verb == "bind":
            self.assignments.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
