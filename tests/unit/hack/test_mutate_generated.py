"""hack/mutate_generated.py (the package hack/mutation): its configuration is valid for this tree, mutants
come from the generators on the lines asked for, a mutant is judged by its owner's tests and the file is
always put back, and an allowed survivor must say why."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from mutation import changes, config, cosmic, draw, execute, mutant, universal


@pytest.fixture(scope="module")
def mg():
    """The runner's functions by name (each from the module whose job it is)."""
    return SimpleNamespace(
        load_packages=config.load_packages, load_allowed=config.load_allowed, ConfigError=config.ConfigError,
        Owner=config.Owner, Package=config.Package, Mutant=mutant.Mutant,
        python_mutants=cosmic.python_mutants, materialize=cosmic.materialize, c_mutants=universal.c_mutants,
        draw_key=draw.draw_key, changed_lines=changes.changed_lines,
        run_mutant=execute.run_mutant, backup_of=execute.backup_of,
    )


@pytest.fixture
def root(monkeypatch):
    """Point the runner at another repository root (every module reads config.ROOT when called)."""
    def at(path: Path) -> Path:
        monkeypatch.setattr(config, "ROOT", path)
        return path
    return at


def test_the_packages_file_of_this_tree_is_valid_and_every_goal_package_has_files(mg):
    packages = {p.name: p for p in mg.load_packages()}
    for name in ("driver/plugin", "driver/limits", "driver/allocator", "native/src"):
        assert packages[name].goal == 90
        files = packages[name].files()
        assert files and all(packages[name].owner_of(f) for f in files)
    # the more specific owner comes first: an enforcement file runs the enforcement tests
    owner = packages["driver/plugin"].owner_of("driver/plugin/enforcement/enforcer.py")
    assert "tests/integration/plugin/test_plugin_enforcement.py" in owner.tests
    assert mg.load_allowed() is not None  # hack/mutants_allowed.yaml parses


def test_a_test_path_that_does_not_exist_is_a_config_error(mg, tmp_path):
    bad = tmp_path / "packages.yaml"
    bad.write_text(
        "packages:\n  - name: x\n    owners:\n      - files: [driver/*.py]\n        tests: [tests/nope]\n"
    )
    with pytest.raises(mg.ConfigError, match=r"packages\[0\].owners\[0\].tests: tests/nope does not exist"):
        mg.load_packages(bad)


def test_an_allowed_survivor_without_a_reason_is_refused(mg, tmp_path):
    f = tmp_path / "allowed.yaml"
    f.write_text('allowed:\n  - file: a.py\n    original: "x = 1"\n    mutated: "x = 2"\n')
    with pytest.raises(mg.ConfigError, match=r"allowed\[0\].reason: missing"):
        mg.load_allowed(f)
    f.write_text('allowed:\n  - {file: a.py, original: " x = 1", mutated: "x = 2 ", reason: unreachable}\n')
    (entry,) = mg.load_allowed(f)
    assert entry.matches(mg.Mutant("a.py", 3, "NumberReplacer", "    x = 1\n", "    x = 2", "..."))
    assert not entry.matches(mg.Mutant("b.py", 3, "NumberReplacer", "x = 1", "x = 2", "..."))
    assert not entry.matches(mg.Mutant("a.py", 3, "NumberReplacer", "x = 1", "x = 0", "..."))
    f.write_text('allowed:\n  - {file: a.py, original: "x = 1", mutated: "*", reason: never observed}\n')
    (entry,) = mg.load_allowed(f)  # every mutant of that line, and of no other
    assert entry.matches(mg.Mutant("a.py", 3, "NumberReplacer", "x = 1", "x = 0", "..."))
    assert not entry.matches(mg.Mutant("a.py", 3, "NumberReplacer", "x = 2", "x = 0", "..."))


def test_a_mutants_place_in_the_draw_depends_on_the_seed_and_the_mutant_not_on_the_others(mg, tree):
    mutants = list(mg.python_mutants("pkg/calc.py", None))
    keys = {m.operator: mg.draw_key("s", m) for m in mutants}
    assert len(set(keys.values())) == len(keys)
    # a line added above moves every mutant's line and occurrence, not its place in the draw
    calc = config.ROOT / "pkg" / "calc.py"
    calc.write_text("X = 1 + 2\n\n" + calc.read_text())
    moved = [m for m in mg.python_mutants("pkg/calc.py", None) if "used" in m.original_line]
    assert {mg.draw_key("s", m) for m in moved} == set(keys.values())
    assert {mg.draw_key("t", m) for m in moved}.isdisjoint(keys.values())


def test_changed_lines_are_read_from_the_new_side_of_each_hunk(mg, monkeypatch):
    diff = (
        "diff --git a/driver/x.py b/driver/x.py\n--- a/driver/x.py\n+++ b/driver/x.py\n"
        "@@ -3,0 +4,2 @@ def f():\n+a\n+b\n@@ -10 +12 @@\n-c\n+d\n@@ -20,3 +21,0 @@\n-e\n"
        "diff --git a/gone.py b/gone.py\n--- a/gone.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n"
    )
    monkeypatch.setattr(changes, "_git", lambda *args: diff)
    assert mg.changed_lines("base") == {"driver/x.py": {4, 5, 12}}


@pytest.fixture
def tree(mg, tmp_path, root):
    """A small repository root: one module, its test, a package owning them."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "calc.py").write_text("def over(used, limit):\n    return used > limit\n")
    (tmp_path / "test_calc.py").write_text(
        "from pkg.calc import over\n\ndef test_over():\n    assert over(2, 1) and not over(1, 1)\n"
    )
    root(tmp_path)
    owner = mg.Owner(("pkg/*.py",), ("test_calc.py",))
    return mg.Package("pkg", (owner,), 90), owner


def test_python_mutants_are_cosmic_rays_on_the_lines_asked_for(mg, tree):
    everything = [mg.materialize(m) for m in mg.python_mutants("pkg/calc.py", None)]
    assert 2 in {m.line for m in everything if m}
    on_2 = [mg.materialize(m) for m in mg.python_mutants("pkg/calc.py", {2})]
    assert on_2 and all(m.line == 2 for m in on_2)
    assert "    return used >= limit" in {m.mutated_line for m in on_2 if m is not None}
    assert not list(mg.python_mutants("pkg/calc.py", {7}))


def test_a_mutant_is_killed_or_survives_by_its_owners_tests_and_the_file_is_put_back(mg, tree):
    pkg, owner = tree
    source = (config.ROOT / "pkg" / "calc.py").read_text()
    made = map(mg.materialize, mg.python_mutants("pkg/calc.py", {2}))
    mutants = {m.mutated_line.strip(): m for m in made if m}
    killed = mutants["return used >= limit"]  # over(1, 1) becomes true: the test fails
    assert mg.run_mutant(killed, pkg, owner, 120, sys.executable)[0] == "killed"
    assert (config.ROOT / "pkg" / "calc.py").read_text() == source
    assert not mg.backup_of(config.ROOT / "pkg" / "calc.py").exists()
    (config.ROOT / "test_calc.py").write_text("def test_nothing():\n    assert True\n")
    assert mg.run_mutant(killed, pkg, owner, 120, sys.executable)[0] == "survived"
    assert (config.ROOT / "pkg" / "calc.py").read_text() == source


@pytest.mark.skipif(not shutil.which("mutate", path=str(Path(sys.executable).parent)), reason="make venv")
def test_c_mutants_are_universalmutators_on_the_lines_asked_for(mg, tmp_path, root):
    root(tmp_path)
    (tmp_path / "q.c").write_text("int over(int used, int limit)\n{\n    return used > limit;\n}\n")
    mutants = list(mg.c_mutants("q.c", {3}))
    assert mutants and all(m.line == 3 for m in mutants)
    assert "    return used >= limit;" in {m.mutated_line for m in mutants}
    assert len({m.text for m in mutants}) == len(mutants)  # the same text twice is one mutant


@pytest.mark.skipif(not shutil.which("mutate", path=str(Path(sys.executable).parent)), reason="make venv")
def test_each_c_mutant_of_a_line_has_a_place_of_its_own_and_a_respaced_line_is_not_one(mg, tmp_path, root):
    root(tmp_path)
    (tmp_path / "q.c").write_text("int f(int a)\n{\n    return g(a, a) + (a > 1);\n}\n")
    mutants = list(mg.c_mutants("q.c", {3}))
    assert len(mutants) > 3
    # every mutant of the one line is drawn on its own (a key per mutant, not per line)
    assert len({mg.draw_key("s", m) for m in mutants}) == len(mutants)
    # swapping g's two identical arguments only respaces the line: the same program, no mutant
    squeezed = "returng(a,a)+(a>1);"
    assert all("".join(m.mutated_line.split()) != squeezed for m in mutants)


@pytest.mark.skipif(not shutil.which("mutate", path=str(Path(sys.executable).parent)), reason="make venv")
def test_a_c_line_that_ends_in_a_block_comment_is_mutated_and_keeps_its_comment(mg, tmp_path, root):
    # universalmutator itself makes no mutant of a line holding a /* */ comment: the runner hides the comment
    root(tmp_path)
    source = (
        "int over(int used, int limit)\n{\n"
        "    int s = used > limit; /* why: a reason */\n"
        '    const char *k = "/* x */"; /* a string that looks like one */\n'
        "    return s; /* the last */\n}\n"
    )
    (tmp_path / "q.c").write_text(source)
    mutants = list(mg.c_mutants("q.c", {3, 5}))
    on = {n: [m for m in mutants if m.line == n] for n in (3, 5)}
    assert on[3] and on[5]
    assert "int s = used >= limit; /* why: a reason */" in {m.mutated_line.strip() for m in on[3]}
    for m in mutants:
        assert m.original_line.rstrip().endswith("*/") and m.mutated_line.rstrip().endswith("*/")
        lines, mutated = source.splitlines(), m.text.splitlines()
        # every other line as it was, comments and all; the mutated line keeps its own comment
        assert [x for i, x in enumerate(mutated) if i != m.line - 1] == [
            x for i, x in enumerate(lines) if i != m.line - 1
        ] or mutated[m.line].strip() in ("break;", "continue;")
        assert mutated[m.line - 1].endswith(lines[m.line - 1][lines[m.line - 1].index(" /*") :])
    # a line whose code holds a quote is given whole (only a lexer could split it): as before, no mutant
    assert not list(mg.c_mutants("q.c", {4}))


def test_a_mutant_of_a_type_annotation_only_is_never_drawn(mg, tmp_path, root):
    root(tmp_path)
    (tmp_path / "a.py").write_text(
        "from __future__ import annotations\n\n"
        "def f(x: int | None = None) -> int | None:\n    y: int | None = x\n    return y or 1\n"
    )
    made = [m for m in map(mg.materialize, mg.python_mutants("a.py", None)) if m]
    assert made, "the body has mutants"
    bodies = [m.original_line for m in made]
    assert all("return" in line or "= x" in line for line in bodies), bodies
