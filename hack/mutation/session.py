"""The run: each drawn mutant in turn against its owner's tests, within the sample, the budget and the cap,
after a baseline run of each owner's tests unmutated; the results go into each package's tally."""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack
from dataclasses import dataclass

from . import config
from .config import Allowed, Owner, Package
from .cosmic import materialize
from .draw import Drawn
from .execute import build, fingerprint, package_lock, restore_leftovers, run_mutant, run_tests
from .score import Tally

# A mutant's timeout when no baseline was measured (--no-baseline): the slowest owner's tests (driver/plugin's
# integration files) take about 80 s on a loaded 2-core machine; a timeout counts as killed.
NO_BASELINE_TIMEOUT_S = 240.0
# A baseline run's own limit: the slowest owner's tests unmutated, with room for a loaded machine.
BASELINE_TIMEOUT_S = 1800


class RunnerBroken(Exception):
    """The run cannot judge mutants (a lock held, an unmutated tree that does not build, a baseline that
    fails): exit status 2."""


class Interrupted(BaseException):
    """SIGTERM (or SIGINT, as KeyboardInterrupt) during the run; every file was restored. A BaseException, as
    KeyboardInterrupt is: the handlers that turn an operator's failure into a skipped mutant (`except
    Exception`) must not swallow it."""


@dataclass(frozen=True)
class Limits:
    sample: int  # valid mutants to run per package (0: all)
    budget: float  # seconds since `started`; no mutant starts after
    max_mutants: int  # mutants to run in all (0: no cap)
    no_baseline: bool  # the owners' tests just passed (CI, after make test): skip their unmutated runs
    started: float  # time.monotonic() at the start of the command


def mutant_timeout(baseline_s: float) -> float:
    """A mutant's limit from its owner's unmutated run: three times it plus 30 s, at least a minute (a
    timeout counts as killed, so a slow machine must not time out a mutant the tests would let pass)."""
    return max(60.0, 3 * baseline_s + 30)


def _on_signal(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run(queue: list[Drawn], tallies: dict[str, Tally], allowed: list[Allowed], limits: Limits,
        python: str) -> None:
    """Run the queue in order, printing a line per mutant run. Raises RunnerBroken or Interrupted (SIGTERM,
    for the duration of the run)."""
    packages = list({p.name: p for _, p, _ in queue}.values())
    with ExitStack() as held:
        for pkg in packages:
            if not held.enter_context(package_lock(pkg)):
                raise RunnerBroken(f"another run is mutating {pkg.name} in {config.ROOT}; wait for it")
        restore_leftovers(packages)
        previous = signal.signal(signal.SIGTERM, _on_signal)
        try:
            _run(packages, queue, tallies, allowed, limits, python)
        finally:
            signal.signal(signal.SIGTERM, previous)


def _run(packages: list[Package], queue: list[Drawn], tallies: dict[str, Tally], allowed: list[Allowed],
         limits: Limits, python: str) -> None:
    unmutated: dict[str, str | None] = {}
    for pkg in packages:  # the unmutated tree builds, once per package
        if not build(pkg):
            raise RunnerBroken(f"{pkg.name}: `{pkg.build}` fails on the unmutated tree")
        unmutated[pkg.name] = fingerprint(pkg)
        if pkg.artifact and unmutated[pkg.name] is None:
            raise RunnerBroken(f"{pkg.name}: cannot read {pkg.artifact} with objcopy after `{pkg.build}`")
    baselines: dict[tuple[str, ...], float] = {}
    ran = 0
    for i, (m, pkg, owner) in enumerate(queue):
        t = tallies[pkg.name]
        if limits.sample and t.run >= limits.sample:  # invalid mutants do not count
            t.not_run += 1
            continue
        # Spent before the mutant is made: making each of thousands of Python mutants left after the budget
        # (a parse and an operator pass over its file) took minutes.
        if (time.monotonic() - limits.started > limits.budget
                or (limits.max_mutants and ran >= limits.max_mutants)):
            t.not_run += 1
            continue
        # An owner whose measured baseline no longer fits the budget runs none of its mutants: they are not
        # run, whether an entry would allow them or not (counting them allowed over-reported the entries,
        # and making each took minutes).
        known = baselines.get(owner.tests)
        if (not limits.no_baseline and known is not None
                and time.monotonic() - limits.started + known > limits.budget):
            t.not_run += 1
            continue
        made = materialize(m)
        if made is None:
            continue
        if any(a.matches(made) for a in allowed):
            t.allowed += 1
            continue
        if limits.no_baseline:  # the suite just passed (CI's make test): no owner's time is known
            timeout = NO_BASELINE_TIMEOUT_S
        else:
            baseline = _baseline(owner, baselines, python)
            timeout = mutant_timeout(baseline)
            if time.monotonic() - limits.started + baseline > limits.budget:
                t.not_run += 1
                continue
        elapsed = time.monotonic() - limits.started
        verdict, detail = run_mutant(made, pkg, owner, timeout, python, unmutated[pkg.name])
        ran += 1
        progress = f"[{i + 1}/{len(queue)} {elapsed:.0f}s]"
        print(f"{progress} {verdict.upper()}: {made.describe()} {detail}", flush=True)
        if verdict == "killed":
            t.killed += 1
        elif verdict == "survived":
            t.survived.append(made)
        elif verdict == "equivalent":
            t.equivalent += 1
        else:
            t.invalid += 1


def _baseline(owner: Owner, baselines: dict[tuple[str, ...], float], python: str) -> float:
    """The owner's tests' unmutated time, run once per owner; RunnerBroken when they fail unmutated (a
    failing test would "kill" every mutant)."""
    if owner.tests not in baselines:
        verdict, detail, took = run_tests(owner.tests, BASELINE_TIMEOUT_S, python)
        if verdict != "passed":
            raise RunnerBroken(f"baseline of {' '.join(owner.tests)} fails unmutated: {detail}")
        baselines[owner.tests] = took
    return baselines[owner.tests]
