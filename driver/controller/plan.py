"""The planner's values: a pending group of claims, a change of one GPU's strategy, a plan (changes and
each pending group's reason) and everything one plan is made from. Pure data; planner.py makes plans.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.controller.nodes import NodeState

# Reasons a pending group is in, as the metrics and events name them.
FITS = "fits"  # fits as the cluster is: the scheduler will place it
HELPED = "helped"  # a change of this plan makes it fit
YOUNG = "young"  # pending for less than the grace period: the scheduler may still place it
UNFIT = "unfit"  # no allowed change of an idle GPU makes it fit
DEFERRED = "deferred"  # not looked at: this plan made its --max-changes already; the next plan will


@dataclass(frozen=True)
class Pending:
    """Claims that must be allocated together on one node (a pod's), pending since `since` (seconds)."""

    key: str  # "ns/name" of the claim (controller) or the pod (simulator)
    namespace: str
    claims: tuple[dict[str, Any], ...]
    since: float
    shape: str = ""  # what makes two groups alike; empty: the claims' specs (the simulator passes its own)


@dataclass(frozen=True)
class Change:
    node: str
    index: int
    uuid: str
    from_strategy: str
    to_strategy: str
    reason: str
    claims: tuple[str, ...]  # keys of the pending groups it is made for


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # pending key -> FITS | HELPED | YOUNG | UNFIT

    def pending_by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(self.reasons.values()).items()))


@dataclass(frozen=True)
class PlanInput:
    nodes: Sequence[NodeState]
    classes: list[dict[str, Any]]
    pending: Sequence[Pending]
    policy: PartitioningPolicySpec
    now: float
    history: dict[str, list[float]] = field(default_factory=dict)  # GPU uuid -> times of its changes
    isolated_namespaces: frozenset[str] = frozenset()
    grace_s: float = 0.0
    max_changes: int = 64  # per plan
    known_unfit: bool = False  # the pending groups were just tried on these nodes (the simulator knows)
    consolidate: bool = True  # idle GPUs return to their node's default strategy (consolidate.py)
    # Homes chosen by the portfolio on the claims seen (layout.py): node -> GPU index -> strategy, and why.
    homes: dict[str, dict[int, str]] = field(default_factory=dict)
    homes_why: str = ""


def score_text(score: dict[str, int | None], chosen: str) -> str:
    """`score: mig 1 GPU, exclusive 1 GPU, soft -` for reasons, Events and `carve status`."""
    parts = [f"{s} {n} GPU{'s' if n != 1 else ''}" if n is not None else f"{s} -" for s, n in score.items()]
    return f"score (GPUs an empty node needs for it): {', '.join(parts)}; won: {chosen}"

