"""A compiled package's mutant that builds to the unmutated program is equivalent by construction (trivial
compiler equivalence, hack/mutation/execute.py's fingerprint): counted apart, its tests never run, while a
mutant that changes the code is run as before. On a small C package built with -O2 -g, loaded by its test
through ctypes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from mutation import config, execute, score, session
from mutation.mutant import Mutant

CALC = "int over(unsigned long used, unsigned long limit) {\n    return used > limit;\n}\n"
TEST = (
    "import ctypes, pathlib\n\n"
    "def test_over():\n"
    "    lib = ctypes.CDLL(str(pathlib.Path(__file__).parent / 'build' / 'libcalc.so'))\n"
    "    (pathlib.Path(__file__).parent / 'ran').write_text('yes')\n"
    "    assert lib.over(2, 1) and not lib.over(1, 1)\n"
)
BUILD = "mkdir -p build && cc -O2 -g -fPIC -shared -o build/libcalc.so calc/calc.c"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    (tmp_path / "calc").mkdir()
    (tmp_path / "calc" / "calc.c").write_text(CALC)
    (tmp_path / "test_calc.py").write_text(TEST)
    (tmp_path / "hack").mkdir()
    (tmp_path / "hack" / "packages.yaml").write_text(
        "packages:\n  - name: calc\n    goal: 90\n"
        f"    build: {BUILD}\n    artifact: build/libcalc.so\n    owners:\n"
        "      - files: [calc/*.c]\n        tests: [test_calc.py]\n"
    )
    monkeypatch.setattr(config, "ROOT", tmp_path)
    monkeypatch.setattr(config, "PACKAGES_FILE", tmp_path / "hack" / "packages.yaml")
    return tmp_path


def _mutant(before: str, after: str) -> Mutant:
    return Mutant("calc/calc.c", 2, "op", before, after, CALC.replace(before, after))


def test_a_mutant_that_builds_to_the_unmutated_library_is_equivalent_and_its_tests_do_not_run(repo, capsys):
    (pkg,) = config.load_packages()
    assert pkg.artifact == "build/libcalc.so"
    # Parentheses move the line's columns in the debug information, and nothing in the code.
    same = _mutant("return used > limit;", "return (used > limit);")
    killed = _mutant("return used > limit;", "return used >= limit;")
    lives = _mutant("return used > limit;", "return used != limit;")  # 2 vs 1 and 1 vs 1 cannot tell
    tally = score.Tally(generated=3)
    limits = session.Limits(sample=0, budget=600, max_mutants=0, no_baseline=True, started=time.monotonic())
    ran = repo / "ran"

    session.run([(same, pkg, pkg.owners[0])], {"calc": tally}, [], limits, sys.executable)
    assert (tally.equivalent, tally.killed, len(tally.survived), tally.invalid) == (1, 0, 0, 0)
    assert not ran.exists()  # the owner's tests never ran for it
    assert "EQUIVALENT: calc/calc.c:2:" in capsys.readouterr().out

    session.run(
        [(killed, pkg, pkg.owners[0]), (lives, pkg, pkg.owners[0])],
        {"calc": tally},
        [],
        limits,
        sys.executable,
    )
    assert (tally.equivalent, tally.killed, tally.survived, tally.run) == (1, 1, [lives], 2)
    assert ran.exists()
    assert (repo / "calc" / "calc.c").read_text() == CALC

    assert score.report({"calc": tally}, [pkg], full=True, took=1) == 1
    assert "calc: 1 / 2 killed (50%" in (out := capsys.readouterr().out)
    assert "0 invalid, 1 built the same as unmutated, 0 allowed as equivalent" in out


def test_the_fingerprint_is_the_programs_not_its_debug_information_nor_its_build_id(repo):
    (pkg,) = config.load_packages()
    assert execute.build(pkg)
    first = execute.fingerprint(pkg)
    lib = repo / "build" / "libcalc.so"
    built = lib.read_bytes()
    (repo / "calc" / "calc.c").write_text("\n" + CALC.replace("limit;", "limit ;"))  # every line moved
    assert execute.build(pkg) and lib.read_bytes() != built  # the debug lines and the build id changed
    assert execute.fingerprint(pkg) == first
    (repo / "calc" / "calc.c").write_text(CALC.replace(">", "<"))
    assert execute.build(pkg) and execute.fingerprint(pkg) != first


def test_a_package_without_an_artifact_runs_every_mutant_and_an_unreadable_one_breaks_the_runner(repo):
    (pkg,) = config.load_packages()
    bare = config.Package(pkg.name, pkg.owners, pkg.goal, pkg.build)
    assert execute.fingerprint(bare) is None
    missing = config.Package(pkg.name, pkg.owners, pkg.goal, "true", "build/none.so")
    limits = session.Limits(sample=0, budget=600, max_mutants=0, no_baseline=True, started=time.monotonic())
    m = _mutant("return used > limit;", "return (used > limit);")
    with pytest.raises(session.RunnerBroken, match=r"calc: cannot read build/none.so with objcopy"):
        session.run([(m, missing, pkg.owners[0])], {"calc": score.Tally()}, [], limits, sys.executable)


def test_an_artifact_without_a_build_is_a_config_error(repo):
    (repo / "hack" / "packages.yaml").write_text(
        "packages:\n  - name: calc\n    artifact: build/libcalc.so\n    owners:\n"
        "      - files: [calc/*.c]\n        tests: [test_calc.py]\n"
    )
    with pytest.raises(config.ConfigError, match=r"packages\[0\]\.artifact: only a package with a build"):
        config.load_packages()
