"""How the planner ranks candidate strategy layouts by their outcome on a workload. Pure.

A candidate is one way to run the GPUs: every GPU under one strategy (`soft`), the reactive planner
starting from one home strategy (`planner:soft`), or a static split of the nodes (`split:mig/soft`). Its
`Outcome` is what running the workload under it gave (the simulator's figures, or on a live cluster the
same figures over the claims it has seen). The rule that picks the winner, in order:

1. fewest pods never scheduled (a layout that cannot run a pod is not cheaper, it is wrong);
2. a candidate no worse than every other on both peak GPUs and mean delay, if there is one;
3. else the fewest peak GPUs among the candidates at or below the best single strategies on both figures
   (fewest peak GPUs of any single strategy, least mean delay of any: the target of issue 27);
4. else no candidate tried reaches that target: the two figures trade against each other on this workload
   (a cluster too small for it), and the objective decides, explicitly (`--objective`):
   - `balanced` (default): the fewest peak GPUs among those whose mean delay is no worse than the best
     single strategy's, so the winner never makes pods wait longer than the best single strategy would;
   - `gpus`: the fewest peak GPUs, ties by delay;
   - `delay`: the least mean delay, ties by GPUs.
   `Choice.rule` then starts with "trade-off", and says so in the reasons and the report.

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


OBJECTIVES = ("balanced", "gpus", "delay")  # --objective; what decides when no candidate is best at both


def _key(o: Outcome) -> tuple[int, float, int, str]:
    # Ties go to a single strategy (the simpler layout), then by name, so the choice is deterministic.
    return (o.peak_gpus, o.mean_delay_s, 0 if o.single else 1, o.candidate)


def _delay_key(o: Outcome) -> tuple[float, int, int, str]:
    return (o.mean_delay_s, o.peak_gpus, 0 if o.single else 1, o.candidate)


def dominates(o: Outcome, peak: int, delay: float) -> bool:
    """At or below `peak` GPUs and `delay` seconds of mean delay at once."""
    return o.peak_gpus <= peak and o.mean_delay_s <= delay + 1e-9


def target(outcomes: Iterable[Outcome]) -> tuple[int, float]:
    """(fewest peak GPUs, least mean delay) over the single strategies among `outcomes` that schedule
    the most pods: the point `auto` must reach on both figures (issue 27). Raises ValueError when none."""
    everything = list(outcomes)
    fewest = min(o.never_scheduled for o in everything)
    singles = [o for o in everything if o.single and o.never_scheduled == fewest]
    if not singles:
        raise ValueError("target: no single strategy among the outcomes")
    return min(o.peak_gpus for o in singles), min(o.mean_delay_s for o in singles)


def choose(outcomes: Iterable[Outcome], objective: str = "balanced") -> Choice:
    """The winning candidate by the module's rule. Raises ValueError when there is none or the
    objective is unknown."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
    everything = list(outcomes)
    if not everything:
        raise ValueError("choose: no candidate outcomes")
    fewest = min(o.never_scheduled for o in everything)
    able = [o for o in everything if o.never_scheduled == fewest]
    if len(able) == 1:
        return Choice(able[0], "only candidate that schedules every pod it can", _ranked(everything, able[0]))
    least_peak = min(o.peak_gpus for o in able)
    least_delay = min(o.mean_delay_s for o in able)
    dominant = sorted((o for o in able if dominates(o, least_peak, least_delay)), key=_key)
    if dominant:
        return Choice(dominant[0], "fewest GPUs and least delay", _ranked(everything, dominant[0]))
    # No candidate is best at both: the figures trade against each other and the objective decides.
    singles = [o for o in able if o.single] or able
    peak_bound = min(o.peak_gpus for o in singles)
    delay_bound = min(o.mean_delay_s for o in singles)
    both = sorted((o for o in able if dominates(o, peak_bound, delay_bound)), key=_key)
    if both:
        return Choice(both[0], "fewest GPUs among those at or below every single strategy on both figures",
                      _ranked(everything, both[0]))
    if objective == "gpus":
        won = sorted(able, key=_key)[0]
        return Choice(won, "trade-off, objective gpus: fewest GPUs (no layout tried is at or below the best "
                      "single strategies on both figures)", _ranked(everything, won))
    if objective == "delay":
        won = sorted(able, key=_delay_key)[0]
        return Choice(won, "trade-off, objective delay: least delay (no layout tried is at or below the best "
                      "single strategies on both figures)", _ranked(everything, won))
    within = sorted((o for o in able if o.mean_delay_s <= delay_bound + 1e-9), key=_key)
    return Choice(within[0], "trade-off, objective balanced: fewest GPUs within the best single strategy's "
                  "delay (no layout tried is at or below the best single strategies on both figures)",
                  _ranked(everything, within[0]))


def _ranked(everything: list[Outcome], winner: Outcome) -> tuple[Outcome, ...]:
    rest = sorted((o for o in everything if o is not winner), key=lambda o: (o.never_scheduled, *_key(o)))
    return (winner, *rest)
