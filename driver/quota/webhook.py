"""The namespace budget's admission check (served by the controller's webhook server, driver/controller/
webhook.py): a ResourceClaim is admitted when its charges fit what its namespace has left; a
ResourceClaimTemplate is refused only when one claim made from it could never fit (it alone is over the
whole budget), since its claims are checked one by one as the resourceclaim controller creates them.

Usage comes from the controller's ResourceClaim informer plus the claims this replica admitted that the
informer has not shown yet (`Ledger`, kept at most `hold_s`), so two claims created back to back are both
counted; one that a later admission step refuses counts until `hold_s` passes (conservative). Replicas do
not share their ledgers: claims created within the informer's lag (well under a second) through two
replicas can overshoot by what those claims ask (docs/quota.md, "Limits").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from driver.quota.budget import (
    CORES,
    COUNTED_CLASSES,
    DEFAULT_MEMORY_STEP,
    LABELS,
    MEMORY,
    RESOURCES,
    BudgetError,
    BudgetRow,
    Decision,
    budget_rows,
    claim_charges,
    decide,
    namespace_usage,
    parse_budget,
    show,
    total,
)

KINDS = {"resourceclaims": "ResourceClaim", "resourceclaimtemplates": "ResourceClaimTemplate"}


@dataclass
class Ledger:
    """Claims this replica admitted that the informer has not listed yet: (namespace, name) -> charge."""

    hold_s: float = 10.0  # the informer shows a created claim well within this
    clock: Callable[[], float] = time.monotonic
    _entries: dict[tuple[str, str], tuple[float, dict[str, Fraction]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, namespace: str, name: str, amounts: dict[str, Fraction]) -> None:
        with self._lock:
            self._entries[(namespace, name)] = (self.clock() + self.hold_s, amounts)

    def pending(self, namespace: str, seen: set[str], skip: str = "") -> list[dict[str, Fraction]]:
        """What the namespace's admitted-but-unlisted claims ask, less `skip` (the claim under review: the
        API server sends one claim to both budget webhooks, and the first one's entry must not charge it
        twice)."""
        now = self.clock()
        with self._lock:
            gone = [
                k
                for k, (until, _) in self._entries.items()
                if until < now or (k[0] == namespace and k[1] in seen)
            ]
            for key in gone:
                del self._entries[key]
            return [a for (ns, n), (_, a) in self._entries.items() if ns == namespace and n != skip]


class BudgetCheck:
    def __init__(
        self,
        claims: Callable[[], Iterable[Mapping[str, Any]]],
        namespace: Callable[[str], Mapping[str, Any] | None],
        namespaces: Callable[[], Iterable[Mapping[str, Any]]],
        counted: frozenset[str] = COUNTED_CLASSES,
        memory_step: int = DEFAULT_MEMORY_STEP,
        ledger: Ledger | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.claims = claims
        self.namespace = namespace
        self.namespaces = namespaces
        self.counted = counted
        self.memory_step = memory_step
        self.ledger = ledger or Ledger()
        self.denials = Counter(
            "carve_namespace_budget_denials",
            "ResourceClaims (and templates) refused for going over their namespace's GPU budget, by "
            "namespace and resource (memory or cores).",
            ["namespace", "resource"],
            registry=registry,
        )
        if registry is not None:
            registry.register(BudgetCollector(self))

    def claims_of(self, namespace: str) -> list[Mapping[str, Any]]:
        return [c for c in self.claims() if (c.get("metadata") or {}).get("namespace") == namespace]

    def review(self, request: Mapping[str, Any], resources: Iterable[str] = RESOURCES) -> Decision:
        """One AdmissionReview request (CREATE of a claim or template) -> the decision."""
        resource = (request.get("resource") or {}).get("resource", "")
        kind = KINDS.get(resource)
        if request.get("operation") != "CREATE" or kind is None:
            return Decision(True)
        ns = request.get("namespace") or ""
        obj = request.get("object") or {}
        name = (obj.get("metadata") or {}).get("name") or (obj.get("metadata") or {}).get("generateName", "")
        namespace = self.namespace(ns)
        if namespace is None:
            return Decision(False, f"namespace {ns}: not found (its GPU budget cannot be read); try again")
        try:
            budget = parse_budget(namespace)
        except BudgetError as e:
            return Decision(False, f"{e}: the namespace's claims are refused until an admin fixes it")
        wanted = [r for r in resources if r in budget.limits]
        if not wanted:
            return Decision(True)
        spec = (obj.get("spec") or {}).get("spec") if kind == "ResourceClaimTemplate" else obj.get("spec")
        where = "spec.spec" if kind == "ResourceClaimTemplate" else "spec"
        try:
            charges = claim_charges(spec or {}, wanted, self.counted, where, self.memory_step)
        except BudgetError as e:
            return Decision(False, f"namespace {ns}: {kind} {name}: {e}")
        if not charges:
            return Decision(True)
        if kind == "ResourceClaimTemplate":
            asked = total(charges)
            for r in wanted:
                if asked[r] > budget.limits[r]:
                    self.denials.labels(namespace=ns, resource=r).inc()
                    return Decision(
                        False,
                        f"namespace {ns}: GPU {r} budget: {kind} {name} asks {show(r, asked[r])} per claim, "
                        f"over the namespace's whole budget of {show(r, budget.limits[r])}: no claim made "
                        "from it could ever be admitted",
                        r,
                    )
            return Decision(True)
        existing = self.claims_of(ns)
        usage = namespace_usage(existing, self.counted, skip=name, memory_step=self.memory_step)
        seen = {(c.get("metadata") or {}).get("name", "") for c in existing}
        extra = self.ledger.pending(ns, seen, skip=name)
        if extra:
            used = dict(usage.used)
            for amounts in extra:
                for r in RESOURCES:
                    used[r] += amounts.get(r, Fraction(0))
            usage = type(usage)(used, usage.claims + len(extra), usage.unreadable)
        decision = decide(budget, kind, name, charges, usage, wanted)
        if not decision.allowed:
            self.denials.labels(namespace=ns, resource=decision.resource).inc()
            return decision
        if not request.get("dryRun") and name:
            self.ledger.add(ns, name, total(charges))
        return decision

    def usage_rows(self) -> list[BudgetRow]:
        """Every budgeted namespace's use (metrics)."""
        return budget_rows(self.namespaces(), self.claims(), self.counted, self.memory_step)


class BudgetCollector(Collector):
    """At scrape time: each budgeted namespace's limit and use (bounded by the namespaces with a budget)."""

    def __init__(self, check: BudgetCheck) -> None:
        self.check = check

    def collect(self) -> Iterator[Metric]:
        families = {
            ("memory", "limit"): GaugeMetricFamily(
                "carve_namespace_memory_budget_bytes",
                f"GPU memory budget of a namespace (label {LABELS[MEMORY]}).",
                labels=["namespace"],
            ),
            ("cores", "limit"): GaugeMetricFamily(
                "carve_namespace_cores_budget_percent",
                f"GPU compute budget of a namespace, percent of one GPU's SMs (label {LABELS[CORES]}).",
                labels=["namespace"],
            ),
            ("memory", "used"): GaugeMetricFamily(
                "carve_namespace_memory_requested_bytes",
                "GPU memory the namespace's soft-slice and MPS claims ask, summed (budgeted namespaces).",
                labels=["namespace"],
            ),
            ("cores", "used"): GaugeMetricFamily(
                "carve_namespace_cores_requested_percent",
                "GPU compute share the namespace's soft-slice and MPS claims ask, summed (budgeted "
                "namespaces).",
                labels=["namespace"],
            ),
        }
        for row in self.check.usage_rows():
            families[(row.resource, "limit")].add_metric([row.namespace], float(row.limit))
            families[(row.resource, "used")].add_metric([row.namespace], float(row.used))
        yield from families.values()
