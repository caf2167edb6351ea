"""The tally per package, the score with its 95% interval, the report printed at the end and the exit
status it implies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .config import Package
from .mutant import Mutant


@dataclass
class Tally:
    generated: int = 0
    killed: int = 0
    survived: list[Mutant] = field(default_factory=list)
    allowed: int = 0
    invalid: int = 0
    equivalent: int = 0  # built to the unmutated tree's code and data (execute.fingerprint): never run
    not_run: int = 0

    @property
    def run(self) -> int:
        """The mutants that count in the score: killed or survived (an allowed one is equivalent, an
        invalid one did not build, an equivalent one built to the unmutated program)."""
        return self.killed + len(self.survived)

    def interval(self) -> tuple[float, float] | None:
        """The score's 95% Wilson interval: a sample of n mutants says where the package's score lies."""
        n = self.run
        if not n:
            return None
        z, p = 1.96, self.killed / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return 100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)

    def score(self) -> float | None:
        # an allowed survivor is an equivalent mutant: not a bug, so not counted against the tests
        return 100.0 * self.killed / self.run if self.run else None


def report(tallies: dict[str, Tally], packages: list[Package], full: bool, took: float) -> int:
    """Print the score of each package that generated mutants and every survivor; the exit status: with
    `full`, 1 when a package with a goal is under it, else 1 when anything survived; 0 otherwise."""
    print(f"\nmutation score per package (killed / run; {took:.0f}s):")
    below = []
    for pkg in packages:
        t = tallies[pkg.name]
        if not t.generated:
            continue
        score = t.score()
        shown = f"{score:.0f}%" if score is not None else "-"
        if (ci := t.interval()) is not None:
            shown += f", 95% interval {ci[0]:.0f}-{ci[1]:.0f}%"
        goal = f", goal {pkg.goal}%" if pkg.goal is not None else ""
        same = f"{t.equivalent} built the same as unmutated, " if pkg.artifact else ""
        print(f"  {pkg.name}: {t.killed} / {t.run} killed ({shown}{goal}); {t.generated} generated, "
              f"{t.invalid} invalid, {same}{t.allowed} allowed as equivalent, {t.not_run} not run")
        if full and pkg.goal is not None and score is not None and score < pkg.goal:
            below.append(pkg.name)
    survivors = [m for t in tallies.values() for m in t.survived]
    if survivors:
        print(f"\n{len(survivors)} survivor(s): a test should fail with each, or hack/mutants_allowed.yaml "
              "lists it with why it is equivalent:")
        for m in survivors:
            print(f"  {m.describe()}")
    if below:
        print(f"\nunder their goal: {', '.join(below)}")
    if full:
        return 1 if below else 0
    return 1 if survivors else 0
