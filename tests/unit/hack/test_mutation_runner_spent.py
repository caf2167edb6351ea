"""Once the budget or the cap is spent, the runner makes no more mutants (making each of thousands of Python
mutants took minutes after a draw's budget ran out), and a SIGTERM while a mutant is made stops the run
instead of being taken for an operator's failure (hack/mutation/session.py, cosmic.py)."""

from __future__ import annotations

import sys
import time

import pytest
from mutation import cosmic, score, session
from mutation.mutant import Mutant
from test_mutation_runner import repo  # noqa: F401  (the small repository fixture)


def _drawn(pkg, n: int) -> list:
    return [
        (Mutant("pkg/calc.py", 2, f"core/NumberReplacer#{i}", "x", "", ""), pkg, pkg.owners[0])
        for i in range(n)
    ]


def test_a_spent_budget_makes_no_more_mutants_and_counts_them_not_run(repo, monkeypatch):  # noqa: F811
    from mutation import config

    (pkg,) = config.load_packages()
    made = []
    monkeypatch.setattr(session, "materialize", lambda m: made.append(m))
    tally = score.Tally()
    spent = session.Limits(sample=0, budget=0, max_mutants=0, no_baseline=True, started=time.monotonic() - 1)
    session.run(_drawn(pkg, 5), {"pkg": tally}, [], spent, sys.executable)
    assert made == [] and tally.not_run == 5


def test_a_sigterm_while_a_mutant_is_made_is_not_a_skipped_mutant(repo, monkeypatch):  # noqa: F811
    import cosmic_ray.mutating

    def interrupted(*_args):
        raise session.Interrupted("SIGTERM")

    monkeypatch.setattr(cosmic_ray.mutating, "mutate_code", interrupted)
    m = Mutant("pkg/calc.py", 2, "core/NumberReplacer#0", "return used > limit", "", "")
    with pytest.raises(session.Interrupted):
        cosmic.materialize(m)


def test_an_operator_that_fails_is_still_a_skipped_mutant(repo, monkeypatch, capsys):  # noqa: F811
    import cosmic_ray.mutating

    def broken(*_args):
        raise AttributeError("dotted name")

    monkeypatch.setattr(cosmic_ray.mutating, "mutate_code", broken)
    m = Mutant("pkg/calc.py", 2, "core/NumberReplacer#0", "return used > limit", "", "")
    assert cosmic.materialize(m) is None
    assert "NumberReplacer could not mutate (AttributeError: dotted name); skipped" in capsys.readouterr().err


def test_an_owner_whose_baseline_no_longer_fits_counts_its_mutants_not_run_not_allowed(repo, monkeypatch):  # noqa: F811
    from mutation import config

    (pkg,) = config.load_packages()
    made = []
    monkeypatch.setattr(session, "materialize", lambda m: made.append(m) or m)
    # the owner's unmutated run takes 50 s; a 60 s budget of which 20 s are gone leaves room for none
    monkeypatch.setattr(
        session, "_baseline", lambda owner, baselines, python: baselines.setdefault(owner.tests, 50.0)
    )
    monkeypatch.setattr(session, "run_mutant", lambda *a: pytest.fail("a mutant ran past the budget"))

    class AllButTheFirst:  # an entry that would allow every mutant but the first drawn
        def matches(self, made) -> bool:
            return not made.operator.endswith("#0")

    tally = score.Tally()
    limits = session.Limits(
        sample=0, budget=60, max_mutants=0, no_baseline=False, started=time.monotonic() - 20
    )
    session.run(_drawn(pkg, 4), {"pkg": tally}, [AllButTheFirst()], limits, sys.executable)
    # the first is made, its owner's baseline measured and found too long; the others are then neither made
    # nor counted allowed: none of them would have run
    assert (tally.allowed, tally.not_run, len(made)) == (0, 4, 1)
