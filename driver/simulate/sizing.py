"""`carve simulate --size`: how many GPUs does this trace need, per strategy and under `auto`?

The cluster file gives the shape (GPU models per node, which groups are pinned) and a starting size; the
answer scales every node group by the same factor (a group of n nodes at scale m/M has ceil(n*m/M) nodes,
M the largest group's count, so a one-group cluster is sized node by node) and looks for the smallest
scale at which the trace meets the target:
- every pod that fits some node under some strategy is scheduled: a strategy that can never run a pod of
  the trace (slots: a training job of more than 32 slots) has no answer, however few GPUs it keeps busy;
- p99 delay <= the target, delay being wait + slowdown (a time-sliced pod that ran 3x as long is late).
The search doubles the file's size up to 8x until the target is met, then bisects below. It assumes more
nodes never make the figures worse; that is how the scheduler's spreading behaves on these traces, not
a theorem, so the answer's run is the one printed (its own figures, not an extrapolation).

Per single strategy the layout is that strategy on every GPU (`--strategy` semantics); `auto` is the
smallest size any of its candidate layouts (driver/simulate/portfolio.py) meets the target at, so its
answer is never above the best single strategy's among those its policy allows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.simulate.engine import SimResult
from driver.simulate.inputs import NodeGroup
from driver.simulate.portfolio import Candidate, candidates

Runner = Callable[[list[NodeGroup], str, PartitioningPolicySpec], SimResult]
MAX_GROWTH = 8  # times the cluster file's size


@dataclass(frozen=True)
class Sized:
    name: str  # a strategy, or `auto`
    choice: str  # the layout that met the target ("soft", "split:mig/soft", ...)
    groups: tuple[NodeGroup, ...] | None  # None: not met even at MAX_GROWTH x the file's size
    result: SimResult | None

    @property
    def gpus(self) -> int | None:
        return None if self.result is None else self.result.gpus_total

    def layout(self) -> str:
        if self.groups is None:
            return "-"
        return " + ".join(f"{g.count} x {_gpus_text(g)}" + (f" {g.strategy}" if g.strategy else "")
                          for g in self.groups if g.count)


@dataclass(frozen=True)
class Sizing:
    target_p99_s: float
    strategies: tuple[Sized, ...]  # single strategies, in the order asked
    auto: Sized

    def sentence(self) -> str:
        if self.auto.groups is None:
            return (f"no layout meets p99 delay <= {self.target_p99_s:g} s within {MAX_GROWTH}x the cluster "
                    "file's size")
        met = [s for s in self.strategies if s.gpus is not None]
        best = min(met, key=lambda s: s.gpus or 0) if met else None  # ties: the first listed
        tail = (f"; the best single strategy, {best.name}, needs {best.gpus}" if best is not None
                else "; no single strategy meets it")
        return (f"this trace needs {self.auto.gpus} GPUs ({self.auto.layout()}) at p99 delay <= "
                f"{self.target_p99_s:g} s under auto ({self.auto.choice}){tail}")

    def report(self) -> dict[str, object]:
        def one(s: Sized) -> dict[str, object]:
            r = s.result
            return {"gpus": s.gpus, "layout": s.layout(), "choice": s.choice,
                    "p99_delay_s": None if r is None else round(r.p99_delay_s, 1),
                    "mean_wait_s": None if r is None else round(r.mean_wait_s, 1),
                    "peak_gpus_busy": None if r is None else r.peak_gpus_busy}
        return {"target_p99_delay_s": self.target_p99_s,
                "strategies": {s.name: one(s) for s in (*self.strategies, self.auto)},
                "answer": self.sentence()}


def _gpus_text(g: NodeGroup) -> str:
    models: dict[str, int] = {}
    for m in g.models:
        models[m] = models.get(m, 0) + 1
    return ",".join(f"{n}x{m}" for m, n in models.items())


def scaled(groups: Sequence[NodeGroup], m: int, big: int) -> list[NodeGroup]:
    return [dataclasses.replace(g, count=math.ceil(g.count * m / big)) for g in groups]


def meets(r: SimResult, target_p99_s: float, unfit: int = 0) -> bool:
    """All pods scheduled but the `unfit` that no strategy can run, and p99 delay within the target."""
    return r.pods_never_scheduled <= unfit and r.p99_delay_s <= target_p99_s


def size_one(c: Candidate, run: Runner, target_p99_s: float, unfit: int = 0,
             known: SimResult | None = None) -> tuple[list[NodeGroup], SimResult] | None:
    """The smallest scale of `c`'s layout that meets the target, and its run; None if none up to 8x.
    `known`: the layout's run at the file's size, if already made (--compare's)."""
    big = max(g.count for g in c.groups)
    tried: dict[int, SimResult] = {} if known is None else {big: known}

    def probe(m: int) -> bool:
        if m not in tried:
            tried[m] = run(scaled(c.groups, m, big), c.strategy, c.policy)
        return meets(tried[m], target_p99_s, unfit)

    hi = big
    while not probe(hi):
        if hi >= big * MAX_GROWTH or tried[hi].pods_never_fit > unfit:
            return None  # too big for the limit, or pods this layout can never run: more nodes won't help
        hi *= 2
    lo = 0  # scale 0: no nodes, never meets a trace with pods
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            hi = mid
        else:
            lo = mid
    return scaled(c.groups, hi, big), tried[hi]


def size(groups: list[NodeGroup], strategies: Sequence[str], policy: PartitioningPolicySpec, run: Runner,
         target_p99_s: float, known: dict[str, SimResult] | None = None) -> Sizing:
    """The sizing answer for each single strategy and for auto. `known`: runs at the file's size already
    made, by candidate name (a single strategy's, and auto's candidates' from its `candidate_results`)."""
    known = dict(known or {})
    for s in strategies:
        if s not in known:
            known[s] = run(groups, s, policy)
    # Pods no strategy can run on the cluster's node shapes (more GPUs than a node has): the floor.
    unfit = min(known[s].pods_never_fit for s in strategies)
    found: dict[str, tuple[list[NodeGroup], SimResult] | None] = {}
    singles = []
    for s in strategies:
        found[s] = size_one(Candidate(s, groups, s, policy), run, target_p99_s, unfit, known[s])
        got = found[s]
        singles.append(Sized(s, s, None if got is None else tuple(got[0]), None if got is None else got[1]))
    best: Sized | None = None
    for c in candidates(groups, policy):
        same = c.name in found and c.strategy == c.name
        got = found[c.name] if same else size_one(c, run, target_p99_s, unfit, known.get(c.name))
        if got is None:
            continue
        here = Sized("auto", c.name, tuple(got[0]), got[1])
        if best is None or (here.gpus, here.result.p99_delay_s) < (best.gpus, best.result.p99_delay_s):
            best = here
    return Sizing(target_p99_s, tuple(singles), best or Sized("auto", "-", None, None))
