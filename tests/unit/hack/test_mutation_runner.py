"""hack/mutation's draw, session, score and command line on a small repository: the draw's order and
interleaving, the sample and budget, an allowed survivor not counted, a broken baseline or a held lock
as exit 2, a leftover backup put back, the score's interval and the exit status of each mode."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from mutation import cli, config, draw, execute, score, session
from mutation.mutant import Mutant

CALC = "def over(used, limit):\n    return used > limit\n"
# kills >=, <, ==, <=; lets != and `is not` live (2 vs 1 and 1 vs 1 do not tell them from >)
TEST = "from pkg.calc import over\n\ndef test_over():\n    assert over(2, 1) and not over(1, 1)\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "calc.py").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TEST)
    (tmp_path / "hack").mkdir()
    (tmp_path / "hack" / "packages.yaml").write_text(
        "packages:\n  - name: pkg\n    goal: 90\n    owners:\n"
        "      - files: [pkg/*.py]\n        tests: [test_calc.py]\n"
    )
    (tmp_path / "hack" / "allowed.yaml").write_text("allowed: []\n")
    monkeypatch.setattr(config, "ROOT", tmp_path)
    monkeypatch.setattr(config, "PACKAGES_FILE", tmp_path / "hack" / "packages.yaml")
    monkeypatch.setattr(config, "ALLOWED_FILE", tmp_path / "hack" / "allowed.yaml")
    return tmp_path


def _main(*args: str) -> int:
    return cli.main([*args, "--python", sys.executable])


def _m(path: str, line: int) -> Mutant:
    return Mutant(path, line, "op", f"line {line}", "x", "text")


def test_interleave_takes_the_files_in_turn_each_in_its_own_order():
    a1, a2, a3, b1 = _m("a.py", 1), _m("a.py", 2), _m("a.py", 3), _m("b.py", 1)
    queue = [(m, None, None) for m in (a1, a2, a3, b1)]
    assert [m for m, _, _ in draw.interleave(queue)] == [a1, b1, a2, a3]


def test_the_draw_orders_by_key_and_counts_what_each_package_generated(repo):
    (pkg,) = config.load_packages()
    queue, generated = draw.draw([pkg], {"pkg/calc.py": None}, "s1")
    assert generated == {"pkg": len(queue)} and len(queue) > 5
    keys = [draw.draw_key("s1", m) for m, _, _ in queue]
    assert keys == sorted(keys)
    again, _ = draw.draw([pkg], {"pkg/calc.py": None}, "s2")
    assert [m for m, _, _ in again] != [m for m, _, _ in queue]  # another seed, another order
    assert draw.draw([pkg], {"other.py": None}, "s1") == ([], {"pkg": 0})  # a file no owner has


@pytest.mark.parametrize(("killed", "survived", "shown"),
                         [(54, 6, (80, 95)), (25, 5, (66, 93)), (6, 2, (41, 93))])
def test_the_interval_is_wilsons_at_95_percent(killed, survived, shown):
    t = score.Tally(killed=killed, survived=[_m("a.py", i) for i in range(survived)])
    low, high = t.interval()
    assert (round(low), round(high)) == shown
    assert t.score() == pytest.approx(100 * killed / (killed + survived))
    assert score.Tally(allowed=3).interval() is None and score.Tally(allowed=3).score() is None


def test_the_report_fails_a_full_run_under_its_goal_and_a_changed_run_on_any_survivor(repo, capsys):
    (pkg,) = config.load_packages()
    nine = score.Tally(generated=20, killed=9, survived=[_m("pkg/calc.py", 2)], allowed=1, invalid=2,
                       not_run=7)
    assert score.report({"pkg": nine}, [pkg], full=True, took=12.3) == 0  # 90%: at its goal
    out = capsys.readouterr().out
    assert "mutation score per package (killed / run; 12s):" in out
    assert ("  pkg: 9 / 10 killed (90%, 95% interval 60-98%, goal 90%); 20 generated, 2 invalid, "
            "1 allowed as equivalent, 7 not run") in out
    assert "1 survivor(s)" in out and "  pkg/calc.py:2: [op] 'line 2' -> 'x'" in out
    assert score.report({"pkg": nine}, [pkg], full=False, took=1) == 1  # a changed line's survivor
    eight = score.Tally(generated=20, killed=8, survived=[_m("pkg/calc.py", 2)] * 2)
    assert score.report({"pkg": eight}, [pkg], full=True, took=1) == 1
    assert "under their goal: pkg" in capsys.readouterr().out
    assert score.report({"pkg": score.Tally()}, [pkg], full=False, took=1) == 0  # nothing generated
    assert "pkg:" not in capsys.readouterr().out


def test_a_full_draw_under_its_goal_exits_1_and_allowing_its_survivors_makes_it_0(repo, capsys):
    assert _main("--full", "--seed", "t") == 1
    out = capsys.readouterr().out
    assert out.startswith("generated mutants of every file of pkg\n")
    assert "SURVIVED: pkg/calc.py:2: [ReplaceComparisonOperator_Gt_NotEq] 'return used > limit' -> " \
           "'return used != limit'" in out
    assert "KILLED: pkg/calc.py:2: [ReplaceComparisonOperator_Gt_GtE]" in out
    assert "under their goal: pkg" in out
    survivors = [ln.split(" -> ")[1].strip("'") for ln in out.splitlines() if ln.startswith("  pkg/calc.py:")]
    entries = "".join(f"  - {{file: pkg/calc.py, original: 'return used > limit', mutated: '{s}', "
                      f"reason: test}}\n" for s in survivors)
    (repo / "hack" / "allowed.yaml").write_text("allowed:\n" + entries)
    assert _main("--full", "--seed", "t") == 0
    out = capsys.readouterr().out
    assert f"{len(survivors)} allowed as equivalent" in out and "SURVIVED" not in out
    assert (repo / "pkg" / "calc.py").read_text() == CALC


def test_the_sample_budget_and_cap_leave_mutants_not_run(repo, capsys):
    assert _main("--at", "pkg/calc.py:2", "--sample", "2", "--seed", "t") in (0, 1)
    out = capsys.readouterr().out
    run = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert len(run) == 2 and ", 0 invalid" in out
    assert _main("--at", "pkg/calc.py:2", "--max-mutants", "1", "--no-baseline") in (0, 1)
    assert len([ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[")]) == 1
    assert _main("--at", "pkg/calc.py:2", "--budget", "0") == 0  # none starts: nothing survived
    out = capsys.readouterr().out
    assert "0 / 0 killed (-, goal 90%)" in out and not [ln for ln in out.splitlines() if ln.startswith("[")]


def test_a_baseline_that_fails_unmutated_or_a_held_lock_is_exit_2(repo, capsys):
    (repo / "test_calc.py").write_text(TEST.replace("not over(1, 1)", "over(1, 1)"))
    assert _main("--full") == 2
    assert "mutate: baseline of test_calc.py fails unmutated: FAILED test_calc.py::test_over" \
        in capsys.readouterr().err
    (repo / "test_calc.py").write_text(TEST)
    (pkg,) = config.load_packages()
    with execute.package_lock(pkg) as held:  # as a run beside this one would
        assert held
        assert _main("--full") == 2
    assert f"mutate: another run is mutating pkg in {repo}; wait for it" in capsys.readouterr().err


def test_a_backup_left_by_a_killed_run_is_put_back_first(repo, capsys):
    calc = repo / "pkg" / "calc.py"
    execute.backup_of(calc).write_text(CALC)
    calc.write_text("def over(used, limit):\n    return used >= limit\n")  # a mutant left in place
    (pkg,) = config.load_packages()
    limits = session.Limits(sample=0, budget=0, max_mutants=0, no_baseline=True, started=time.monotonic())
    queue = [(_m("pkg/calc.py", 2), pkg, pkg.owners[0])]
    session.run(queue, {"pkg": score.Tally()}, [], limits, sys.executable)
    assert calc.read_text() == CALC and not execute.backup_of(calc).exists()
    assert "restored pkg/calc.py from a previous interrupted run" in capsys.readouterr().out


def test_a_mutants_timeout_is_three_baselines_and_30_s_at_least_a_minute():
    assert session.mutant_timeout(5) == 60 and session.mutant_timeout(40) == 150
