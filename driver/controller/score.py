"""How the planner ranks candidate strategy layouts by their outcome on a workload. Pure.

A candidate is one way to run the GPUs: every GPU under one strategy (`soft`), the reactive planner
starting from one home strategy (`planner:soft`), or a static split of the nodes (`split:mig/soft`). Its
`Outcome` is what running the workload under it gave (the simulator's figures, or on a live cluster the
same figures over the claims it has seen). The rule that picks the winner, in order:

1. fewest pods never scheduled (a layout that cannot run a pod is not cheaper, it is wrong);
2. a candidate no worse than every other on both peak GPUs and mean delay, if there is one;
3. else the fewest peak GPUs among those whose mean delay is no worse than the best single strategy's,
   so the winner never makes pods wait longer than the best single strategy would, ties by mean delay.

Delay is wait plus slowdown: a pod that starts at once but runs at a third of its speed on a time-sliced
GPU is late too (`mean_delay_s` = mean wait + mean extra run time). Since every single strategy is a
candidate, the winner is never behind the best single strategy on the rule's first criterion that
differs; `Choice.why` says which rule decided, with the figures, for logs, Events and `carve status`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

PLANNER_PREFIX = "planner:"
SPLIT_PREFIX = "split:"


@dataclass(frozen=True)
class Outcome:
    candidate: str  # "soft", "planner:soft", "split:mig/soft"
    peak_gpus: int
    mean_wait_s: float
    mean_delay_s: float  # mean wait + mean extra run time (time-slicing slowdown)
    p99_wait_s: float = 0.0
    never_scheduled: int = 0

    @property
    def single(self) -> bool:
        """Every GPU under one strategy, fixed (the baseline auto must not lose to)."""
        return ":" not in self.candidate

    def figures(self) -> str:
        return (f"{self.candidate}: peak {self.peak_gpus} GPUs, mean delay {self.mean_delay_s:.1f} s"
                + (f", {self.never_scheduled} never scheduled" if self.never_scheduled else ""))


@dataclass(frozen=True)
class Choice:
    winner: Outcome
    rule: str  # "dominates" | "fewest GPUs within the best single strategy's delay" | "only candidate"
    ranked: tuple[Outcome, ...] = field(default=())  # every candidate, best first

    @property
    def why(self) -> str:
        others = "; ".join(o.figures() for o in self.ranked[1:4])
        return f"{self.winner.figures()} ({self.rule})" + (f"; next: {others}" if others else "")


def _key(o: Outcome) -> tuple[int, float, int, str]:
    # Ties go to a single strategy (the simpler layout), then by name, so the choice is deterministic.
    return (o.peak_gpus, o.mean_delay_s, 0 if o.single else 1, o.candidate)


def choose(outcomes: Iterable[Outcome]) -> Choice:
    """The winning candidate by the module's rule. Raises ValueError when there is none."""
    everything = list(outcomes)
    if not everything:
        raise ValueError("choose: no candidate outcomes")
    fewest = min(o.never_scheduled for o in everything)
    able = [o for o in everything if o.never_scheduled == fewest]
    if len(able) == 1:
        return Choice(able[0], "only candidate that schedules every pod it can", _ranked(everything, able[0]))
    least_peak = min(o.peak_gpus for o in able)
    least_delay = min(o.mean_delay_s for o in able)
    dominant = sorted((o for o in able if o.peak_gpus == least_peak and o.mean_delay_s <= least_delay + 1e-9),
                      key=_key)
    if dominant:
        return Choice(dominant[0], "fewest GPUs and least delay", _ranked(everything, dominant[0]))
    singles = [o for o in able if o.single] or able
    bound = min(o.mean_delay_s for o in singles)
    within = sorted((o for o in able if o.mean_delay_s <= bound + 1e-9), key=_key)
    return Choice(within[0], "fewest GPUs within the best single strategy's delay",
                  _ranked(everything, within[0]))


def _ranked(everything: list[Outcome], winner: Outcome) -> tuple[Outcome, ...]:
    rest = sorted((o for o in everything if o is not winner), key=lambda o: (o.never_scheduled, *_key(o)))
    return (winner, *rest)
