#!/usr/bin/env python3
"""Generated mutation testing: mutants made by well-kept generators, each run against the tests that own it.

hack/mutate.py plants a curated list of bugs (the regression set). This plants the bugs nobody listed:
cosmic-ray's operators make the Python mutants (comparison, arithmetic, boolean, constant, keyword, break/
continue, exception, zero-iteration loop...), universalmutator's C rules the C ones. Each mutant is written
into its file, the package's build (C) and its owner's tests (hack/mutation_packages.yaml) run, and the file
is put back whatever happens; a backup beside it (`.<name>.mutate-orig`) makes even a SIGKILLed run
recoverable by the next one. A mutant is *killed* when the tests fail or time out, *survived* when they pass,
*invalid* when it does not build (not counted). A survivor fails the check unless
hack/mutants_allowed.yaml lists it with a reason (an equivalent mutant: no test can tell it from the code).

    hack/mutate_generated.py --changed-since REF   the lines changed since REF (CI: see docs/testing.md)
    hack/mutate_generated.py --full --sample 30    30 mutants of each package, per-package score (make mutate)
    hack/mutate_generated.py --at FILE:LINE        every mutant of that line (a survivor, once tested)

Time-boxed by --budget (or $CARVE_MUTATE_BUDGET_S) and --max-mutants: no mutant starts once either is
spent; what ran is reported. Mutants are drawn in a fixed pseudo-random order (--seed; each mutant's place
is a hash of the seed and of the mutant itself, draw_key), so a run is reproducible, a survivor stays drawn
until it is killed or allowed, and a short budget still samples every changed file (files interleaved).
Exit status: 0 clean, 1 a survivor not allowed (or, with --full, a package under its goal), 2 a
configuration or baseline problem.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import fnmatch
import hashlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PACKAGES_FILE = ROOT / "hack" / "mutation_packages.yaml"
ALLOWED_FILE = ROOT / "hack" / "mutants_allowed.yaml"
DEFAULT_BUDGET_S = 300
DEFAULT_SEED = "carve"
# A mutant's timeout when no baseline was measured (--no-baseline): the slowest owner's tests (driver/plugin's
# integration files) take about 80 s on a loaded 2-core machine; a timeout counts as killed.
NO_BASELINE_TIMEOUT_S = 240.0
# Operators whose mutants are not bugs a test can catch in this code base, with why:
SKIPPED_OPERATORS = {
    # decorators here are @dataclass/@property/@staticmethod/@classmethod/@contextmanager: removing one
    # breaks the import or every caller at once (killed by any test), never a plausible single-point bug
    "core/RemoveDecorator",
    # inserts a variable into an unrelated expression: mostly NameErrors at import, not bugs
    "core/VariableInserter",
}


class ConfigError(Exception):
    """hack/mutation_packages.yaml or hack/mutants_allowed.yaml is malformed; names the entry and field."""


@dataclass(frozen=True)
class Owner:
    files: tuple[str, ...]
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Package:
    name: str
    owners: tuple[Owner, ...]
    goal: int | None = None
    build: str = ""

    def owner_of(self, path: str) -> Owner | None:
        return next((o for o in self.owners if any(fnmatch.fnmatchcase(path, g) for g in o.files)), None)

    def files(self) -> list[str]:
        out = set()
        for o in self.owners:
            for g in o.files:
                out.update(str(p.relative_to(ROOT)) for p in ROOT.glob(g) if p.is_file())
        return sorted(out)


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to ROOT
    line: int
    operator: str
    original_line: str
    mutated_line: str
    text: str = field(repr=False)  # the whole mutated file
    nth: int = 0  # Python: which of its operator's mutants of this line (the draw's key, draw_key)

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.path}\0{self.text}".encode()).hexdigest()[:16]

    def describe(self) -> str:
        change = f"{self.original_line.strip()!r} -> {self.mutated_line.strip()!r}"
        return f"{self.path}:{self.line}: [{self.operator}] {change}"


@dataclass(frozen=True)
class Allowed:
    path: str
    original: str
    mutated: str
    reason: str

    def matches(self, m: Mutant) -> bool:
        # `mutated: "*"`: every mutant of the line (a line whose effect no test can observe, said in reason)
        return (m.path == self.path and m.original_line.strip() == self.original.strip()
                and (self.mutated.strip() == "*" or m.mutated_line.strip() == self.mutated.strip()))


# --- configuration ---------------------------------------------------------------------------------------

def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: a non-empty list of strings")
    return tuple(value)


def load_packages(path: Path = PACKAGES_FILE) -> list[Package]:
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("packages"), list):
        raise ConfigError(f"{path}: expected a mapping with a 'packages' list")
    out = []
    for i, p in enumerate(raw["packages"]):
        where = f"{path}: packages[{i}]"
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise ConfigError(f"{where}.name: missing")
        if not isinstance(p.get("owners"), list) or not p["owners"]:
            raise ConfigError(f"{where}.owners: a non-empty list")
        owners = []
        for j, o in enumerate(p["owners"]):
            if not isinstance(o, dict):
                raise ConfigError(f"{where}.owners[{j}]: expected a mapping")
            tests = _strings(o.get("tests"), f"{where}.owners[{j}].tests")
            for t in tests:
                if not (ROOT / t.split("::")[0]).exists():
                    raise ConfigError(f"{where}.owners[{j}].tests: {t} does not exist")
            owners.append(Owner(_strings(o.get("files"), f"{where}.owners[{j}].files"), tests))
        goal = p.get("goal")
        if goal is not None and not (isinstance(goal, int) and 0 <= goal <= 100):
            raise ConfigError(f"{where}.goal: a percentage (0-100)")
        out.append(Package(p["name"], tuple(owners), goal, str(p.get("build") or "")))
    return out


def load_allowed(path: Path = ALLOWED_FILE) -> list[Allowed]:
    if not path.exists():
        return []
    raw = yaml.safe_load(path.read_text()) or {}
    entries = raw.get("allowed") if isinstance(raw, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: 'allowed' must be a list")
    out = []
    for i, e in enumerate(entries):
        where = f"{path}: allowed[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping")
        for key in ("file", "original", "mutated", "reason"):
            if not isinstance(e.get(key), str) or not e[key].strip():
                raise ConfigError(f"{where}.{key}: missing (each allowed survivor says why it is equivalent)")
        out.append(Allowed(e["file"], e["original"], e["mutated"], e["reason"]))
    return out


# --- what changed ----------------------------------------------------------------------------------------

def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def default_since() -> str:
    """The base a change is measured from: $CARVE_MUTATE_SINCE; on a branch, its merge-base with main; on
    main (CI's fresh clone, full history), the first-parent ancestor of HEAD that was main 24 hours before
    HEAD's commit: the diff is what the last day's merges and commits brought (a session's work). A
    fresh clone has no record of which commit CI passed last, so the window is by commit time."""
    if os.environ.get("CARVE_MUTATE_SINCE"):
        return os.environ["CARVE_MUTATE_SINCE"]
    branch = _git("rev-parse", "--abbrev-ref", "HEAD").strip()
    if branch not in ("main", "HEAD"):
        for main in ("main", "origin/main"):
            try:
                return _git("merge-base", "HEAD", main).strip()
            except subprocess.CalledProcessError:
                continue
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        print("mutate: a shallow clone has no history to compare with: fetch it (git fetch --unshallow) or "
              "set CARVE_MUTATE_SINCE", file=sys.stderr)
    head_time = int(_git("log", "-1", "--format=%ct", "HEAD").strip())
    before = _git("rev-list", "-1", "--first-parent", f"--before={head_time - 24 * 3600}", "HEAD").strip()
    return before or _git("rev-list", "--max-parents=0", "HEAD").split()[0]


_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def changed_lines(since: str) -> dict[str, set[int]]:
    """File -> lines added or changed since `since` (in the working tree, committed or not)."""
    out: dict[str, set[int]] = {}
    current = None
    for line in _git("diff", "-U0", "--no-color", "--no-ext-diff", since, "--").splitlines():
        if line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif current and (m := _HUNK.match(line)):
            start, count = int(m[1]), int(m[2] if m[2] is not None else 1)
            out.setdefault(current, set()).update(range(start, start + count))
    return {f: lines for f, lines in out.items() if lines}


# --- generators --------------------------------------------------------------------------------------------

def python_mutants(path: str, lines: set[int] | None) -> Iterator[Mutant]:
    """cosmic-ray's operators over the file's parso tree, one mutant per (operator, occurrence). Positions
    are cheap, the mutated text is not (a parse per mutant): it is made when the mutant is drawn."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast

    source = (ROOT / path).read_text()
    original = source.splitlines()
    tree = get_ast(source)
    for name in sorted(cosmic_ray.plugins.operator_names()):
        if name in SKIPPED_OPERATORS:
            continue
        cls = cosmic_ray.plugins.get_operator(name)
        if cls.arguments():  # operators that need arguments (none by default in cosmic-ray's set)
            continue
        operator = cls()
        positions = [start for node in ast_nodes(tree) for start, _ in operator.mutation_positions(node)]
        on_line: dict[int, int] = {}
        for occurrence, (line, _col) in enumerate(positions):
            nth = on_line[line] = on_line.get(line, -1) + 1
            if lines is not None and line not in lines:
                continue
            yield Mutant(path, line, f"{name}#{occurrence}",
                         original[line - 1] if line <= len(original) else "", "", "", nth)


def _without_annotations(code: str) -> str | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    return ast.dump(tree)


def _only_annotations_differ(source: str, text: str) -> bool:
    """A mutant of a type annotation only: equivalent (the code base postpones their evaluation, PEP 563;
    they are the type checker's, not behaviour), so never drawn."""
    stripped = _without_annotations(text)
    return stripped is not None and stripped == _without_annotations(source)


def materialize(m: Mutant) -> Mutant | None:
    """The mutant with its text (Python mutants are made when drawn); None when the operator changes
    nothing there."""
    if m.text:
        return m
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    name, _, occurrence = m.operator.rpartition("#")
    source = (ROOT / m.path).read_text()
    try:
        text = mutate_code(source, cosmic_ray.plugins.get_operator(name)(), int(occurrence))
    except Exception as e:  # an operator that fails on a node shape (cosmic-ray 8.7's ExceptionReplacer
        # on a dotted exception name): no mutant there, said once per mutant, the run goes on
        print(f"mutate: {m.path}:{m.line}: {name} could not mutate ({type(e).__name__}: {e}); skipped",
              file=sys.stderr)
        return None
    if text is None or text == source or _only_annotations_differ(source, text):
        return None
    mutated = text.splitlines()
    line = mutated[m.line - 1] if m.line <= len(mutated) else ""
    return Mutant(m.path, m.line, name.removeprefix("core/"), m.original_line, line, text, m.nth)


_UM_MUTANT = re.compile(
    r"PROCESSING MUTANT: (\d+): (.*?)  ==>  (.*?)\.\.\.VALID \[written to (.*?)\]", re.DOTALL
)


def c_mutants(path: str, lines: set[int] | None) -> Iterator[Mutant]:
    """universalmutator's C rules over the file (mutants written to a temporary directory, read back; the
    line and the change come from its log, which names the file each mutant went to)."""
    mutate = shutil.which("mutate", path=str(Path(sys.executable).parent)) or shutil.which("mutate")
    if not mutate:
        raise ConfigError("universalmutator's `mutate` not found: pip install universalmutator (make venv)")
    source = (ROOT / path).read_text()
    with tempfile.TemporaryDirectory(prefix="carve-mutants-") as tmp:
        cmd = [mutate, str(ROOT / path), "c", "--noCheck", "--mutantDir", tmp]
        if lines is not None:
            (Path(tmp) / "lines.txt").write_text(" ".join(map(str, sorted(lines))))
            cmd += ["--lines", str(Path(tmp) / "lines.txt")]
        log = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True, timeout=300).stdout
        seen = set()
        for m in _UM_MUTANT.finditer(log):
            text = Path(m[4]).read_text(errors="replace")
            if text == source or text in seen:
                continue
            seen.add(text)
            yield Mutant(path, int(m[1]), "universalmutator", m[2], m[3], text)


def draw_key(seed: str, m: Mutant) -> str:
    """Where a mutant falls in the draw: a hash of the seed and of what the mutant is (its file, the line's
    text, the operator and, for C, the mutated line), not of its position among the others. So a mutant
    keeps its place when other code changes or a test is added: a survivor CI drew is drawn again until a
    test kills it or hack/mutants_allowed.yaml lists it, and a run on the same tree draws the same sample.
    (Python mutants are made when drawn, so the operator and which of its mutants of the line it is stand
    in for the mutated text.)"""
    name, _, occurrence = m.operator.rpartition("#")
    what = f"{name}#{m.nth}" if occurrence else m.mutated_line.strip()
    return hashlib.sha256(f"{seed}\0{m.path}\0{m.original_line.strip()}\0{what}".encode()).hexdigest()


def mutants_of(path: str, lines: set[int] | None) -> Iterator[Mutant]:
    if path.endswith(".py"):
        yield from python_mutants(path, lines)
    elif path.endswith((".c", ".h")):
        yield from c_mutants(path, lines)


# --- running one mutant --------------------------------------------------------------------------------

def backup_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.mutate-orig")


def restore_leftovers(packages: Iterable[Package]) -> None:
    """A run killed with SIGKILL leaves its backup: put the original back before anything else."""
    for pkg in packages:
        for f in pkg.files():
            backup = backup_of(ROOT / f)
            if backup.exists():
                os.replace(backup, ROOT / f)
                print(f"restored {f} from a previous interrupted run", flush=True)


def run_tests(tests: tuple[str, ...], timeout: float, python: str) -> tuple[str, str, float]:
    """('passed' | 'failed' | 'timeout', detail, seconds)."""
    cmd = [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    # No bytecode written: a mutant's .pyc carries the source's mtime (seconds) and size, and a mutant of
    # the same size restored within the same second would be run again from it by every later test.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
                           start_new_session=True, env=env)
    except subprocess.TimeoutExpired:
        return "timeout", f"timed out after {timeout:.0f}s", time.monotonic() - start
    took = time.monotonic() - start
    if r.returncode == 0:
        return "passed", "", took
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return "failed", failed[0] if failed else f"pytest exit {r.returncode}", took


def _drop_bytecode(target: Path) -> None:
    """The module's cached bytecode, which could be a mutant's from an earlier run (see run_tests)."""
    for pyc in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def build(pkg: Package) -> bool:
    if not pkg.build:
        return True
    return subprocess.run(pkg.build, shell=True, cwd=ROOT, capture_output=True, check=False).returncode == 0


def run_mutant(m: Mutant, pkg: Package, owner: Owner, timeout: float, python: str) -> tuple[str, str]:
    """('killed' | 'survived' | 'invalid', detail); the file is restored (and rebuilt) on return."""
    target = ROOT / m.path
    _drop_bytecode(target)
    original = target.read_bytes()
    backup = backup_of(target)
    backup.write_bytes(original)
    try:
        target.write_text(m.text)
        if not build(pkg):
            return "invalid", "does not build"
        if m.path.endswith(".py"):
            check = subprocess.run([python, "-m", "py_compile", str(target)], capture_output=True)
            if check.returncode != 0:
                return "invalid", "does not compile"
        verdict, detail, took = run_tests(owner.tests, timeout, python)
        if verdict == "passed":
            return "survived", f"tests passed in {took:.0f}s"
        return "killed", f"{detail} ({took:.0f}s)"
    finally:
        target.write_bytes(original)
        backup.unlink(missing_ok=True)
        _drop_bytecode(target)
        if pkg.build:
            build(pkg)


# --- the run -------------------------------------------------------------------------------------------

@dataclass
class Tally:
    generated: int = 0
    killed: int = 0
    survived: list[Mutant] = field(default_factory=list)
    allowed: int = 0
    invalid: int = 0
    not_run: int = 0

    @property
    def counted(self) -> int:
        return self.killed + len(self.survived) + self.allowed

    def interval(self) -> tuple[float, float] | None:
        """The score's 95% Wilson interval: a sample of n mutants says where the package's score lies."""
        n = self.killed + len(self.survived)
        if not n:
            return None
        z, p = 1.96, self.killed / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return 100.0 * max(0.0, centre - half), 100.0 * min(1.0, centre + half)

    def score(self) -> float | None:
        # an allowed survivor is an equivalent mutant: not a bug, so not counted against the tests
        total = self.killed + len(self.survived)
        return 100.0 * self.killed / total if total else None


class _Interrupted(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    raise _Interrupted(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--changed-since", metavar="REF", nargs="?", const="",
                      help="mutate the lines changed since REF (default: see docs/testing.md)")
    mode.add_argument("--full", action="store_true", help="every file of each package (sampled: --sample)")
    mode.add_argument("--at", action="append", metavar="FILE:LINE",
                      help="every mutant of these lines (a survivor again, once its test is written)")
    parser.add_argument("--sample", type=int, default=0,
                        help="run this many valid mutants per package, drawn at random (0: all)")
    parser.add_argument("--package", action="append", default=[], help="only these packages (repeatable)")
    budget = float(os.environ.get("CARVE_MUTATE_BUDGET_S", DEFAULT_BUDGET_S))
    parser.add_argument("--budget", type=float, default=budget,
                        help="seconds; no mutant starts after (default $CARVE_MUTATE_BUDGET_S or 300)")
    parser.add_argument("--seed", default=DEFAULT_SEED,
                        help=f"the draw order's seed (default {DEFAULT_SEED!r})")
    parser.add_argument("--max-mutants", type=int, default=0,
                        help="run at most this many mutants in all (0: no cap; CI's cap, with --budget)")
    parser.add_argument("--list", action="store_true", help="print the mutants that would run, run none")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the owners' unmutated runs: only right after the whole suite passed "
                             "(CI, after make test); each mutant then has NO_BASELINE_TIMEOUT_S")
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        packages = [p for p in load_packages() if not args.package or p.name in args.package]
        allowed = load_allowed()
        if args.package and len(packages) != len(set(args.package)):
            known = [p.name for p in load_packages()]
            raise ConfigError(f"unknown package in {args.package}; known: {known}")
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2

    if args.at:
        wanted: dict[str, set[int] | None] = {}
        for spot in args.at:
            f, _, line = spot.rpartition(":")
            if not line.isdigit() or not (ROOT / f).is_file():
                print(f"mutate: --at {spot}: expected FILE:LINE of an existing file", file=sys.stderr)
                return 2
            wanted.setdefault(f, set()).add(int(line))  # type: ignore[union-attr]
        print(f"generated mutants of {', '.join(args.at)}", flush=True)
    elif args.full:
        wanted = {f: None for p in packages for f in p.files()}
        print(f"generated mutants of every file of {', '.join(p.name for p in packages)}", flush=True)
    else:
        since = args.changed_since or default_since()
        changed = changed_lines(since)
        wanted = {f: lines for f, lines in changed.items()
                  if any(p.owner_of(f) for p in packages) and (ROOT / f).exists()}
        print(f"generated mutants of the lines changed since {since[:12]}: {len(wanted)} file(s) in the "
              f"mutation packages", flush=True)

    seed = args.seed
    tallies: dict[str, Tally] = {p.name: Tally() for p in packages}
    queue: list[tuple[Mutant, Package, Owner]] = []
    try:
        for pkg in packages:
            mine = []
            for f in sorted(wanted):
                owner = pkg.owner_of(f)
                if owner is None:
                    continue
                mine += [(m, pkg, owner) for m in mutants_of(f, wanted[f])]
            tallies[pkg.name].generated = len(mine)
            queue += sorted(mine, key=lambda item: draw_key(seed, item[0]))
    except (ConfigError, subprocess.SubprocessError) as e:
        print(f"mutate: generating mutants: {e}", file=sys.stderr)
        return 2
    # Interleave the packages (and so the files) so that a short budget still samples each of them.
    queue = _interleave(queue)
    if args.list:
        for m, pkg, owner in queue:
            if (m := materialize(m)) is not None:
                print(f"{pkg.name}: {m.describe()}  tests: {' '.join(owner.tests)}")
        return 0

    # One run at a time per package of a tree: a second one would take the first's backup for a leftover
    # and put it back under the first's running tests. (Runs of different packages may share a tree, when
    # one's mutants cannot reach the other's tests: driver/allocator beside native/src, not native/src
    # beside driver/limits, whose tests preload the limiter.)
    for pkg in {p.name: p for _, p, _ in queue}.values():
        tag = hashlib.sha256(f"{ROOT}\0{pkg.name}".encode()).hexdigest()[:12]
        lock = os.open(Path(tempfile.gettempdir()) / f"carve-mutate-{tag}.lock", os.O_RDWR | os.O_CREAT)
        try:  # held until the process exits
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"mutate: another run is mutating {pkg.name} in {ROOT}; wait for it", file=sys.stderr)
            return 2
    restore_leftovers({p.name: p for _, p, _ in queue}.values())
    signal.signal(signal.SIGTERM, _on_signal)
    baselines: dict[tuple[str, ...], float | None] = {}
    ran = 0
    try:
        for pkg in {p.name: p for _, p, _ in queue}.values():  # the unmutated tree builds, once per package
            if not build(pkg):
                print(f"mutate: {pkg.name}: `{pkg.build}` fails on the unmutated tree", file=sys.stderr)
                return 2
        for i, (m, pkg, owner) in enumerate(queue):
            t = tallies[pkg.name]
            if args.sample and t.killed + len(t.survived) >= args.sample:  # invalid mutants do not count
                t.not_run += 1
                continue
            m = materialize(m)
            if m is None:
                continue
            if any(a.matches(m) for a in allowed):
                t.allowed += 1
                continue
            if time.monotonic() - started > args.budget or (args.max_mutants and ran >= args.max_mutants):
                t.not_run += 1
                continue
            if args.no_baseline:  # the suite just passed (CI's make test): no owner's time is known
                elapsed = time.monotonic() - started
                timeout = NO_BASELINE_TIMEOUT_S
            else:
                if owner.tests not in baselines:
                    verdict, detail, took = run_tests(owner.tests, 1800, args.python)
                    if verdict != "passed":
                        tests = " ".join(owner.tests)
                        print(f"mutate: baseline of {tests} fails unmutated: {detail}", file=sys.stderr)
                        return 2
                    baselines[owner.tests] = took
                timeout = max(60.0, 3 * baselines[owner.tests] + 30)
                elapsed = time.monotonic() - started
                if elapsed + baselines[owner.tests] > args.budget:
                    t.not_run += 1
                    continue
            verdict, detail = run_mutant(m, pkg, owner, timeout, args.python)
            ran += 1
            progress = f"[{i + 1}/{len(queue)} {elapsed:.0f}s]"
            print(f"{progress} {verdict.upper()}: {m.describe()} {detail}", flush=True)
            if verdict == "killed":
                t.killed += 1
            elif verdict == "survived":
                t.survived.append(m)
            else:
                t.invalid += 1
    except (KeyboardInterrupt, _Interrupted) as e:
        print(f"\ninterrupted ({type(e).__name__} {e}); every file was restored", file=sys.stderr)
        return 130
    return report(tallies, packages, full=args.full, took=time.monotonic() - started)


def _interleave(queue: list[tuple[Mutant, Package, Owner]]) -> list[tuple[Mutant, Package, Owner]]:
    by_file: dict[str, list] = {}
    for item in queue:
        by_file.setdefault(item[0].path, []).append(item)
    out = []
    lists = list(by_file.values())
    while any(lists):
        for lst in lists:
            if lst:
                out.append(lst.pop(0))
    return out


def report(tallies: dict[str, Tally], packages: list[Package], full: bool, took: float) -> int:
    print(f"\nmutation score per package (killed / run; {took:.0f}s):")
    below = []
    for pkg in packages:
        t = tallies[pkg.name]
        if not t.generated:
            continue
        score = t.score()
        run = t.killed + len(t.survived)
        shown = f"{score:.0f}%" if score is not None else "-"
        if (ci := t.interval()) is not None:
            shown += f", 95% interval {ci[0]:.0f}-{ci[1]:.0f}%"
        goal = f", goal {pkg.goal}%" if pkg.goal is not None else ""
        print(f"  {pkg.name}: {t.killed} / {run} killed ({shown}{goal}); {t.generated} generated, "
              f"{t.invalid} invalid, {t.allowed} allowed as equivalent, {t.not_run} not run")
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


if __name__ == "__main__":
    sys.exit(main())
