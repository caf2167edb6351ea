"""The command line (hack/mutate_generated.py): the flags, what to mutate (changed lines, every file, or
given lines), the exit status. Exit status: 0 clean, 1 a survivor not allowed (or, with --full, a package
under its goal), 2 a configuration or baseline problem, 130 interrupted."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import yaml

from . import config
from .changes import changed_lines, default_since
from .config import ConfigError, Package, load_allowed, load_packages
from .cosmic import materialize
from .draw import draw
from .score import Tally, report
from .session import Interrupted, Limits, RunnerBroken, run

DEFAULT_BUDGET_S = 300
DEFAULT_SEED = "carve"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--changed-since", metavar="REF", nargs="?", const="",
                      help="mutate the lines changed since REF (default: see docs/testing.md)")
    mode.add_argument("--full", action="store_true", help="every file of each package (sampled: --sample)")
    mode.add_argument("--at", action="append", metavar="FILE:LINE",
                      help="every mutant of these lines (a survivor again, once its test is written)")
    p.add_argument("--sample", type=int, default=0,
                   help="run this many valid mutants per package, drawn at random (0: all)")
    p.add_argument("--package", action="append", default=[], help="only these packages (repeatable)")
    budget = float(os.environ.get("CARVE_MUTATE_BUDGET_S", DEFAULT_BUDGET_S))
    p.add_argument("--budget", type=float, default=budget,
                   help="seconds; no mutant starts after (default $CARVE_MUTATE_BUDGET_S or 300)")
    p.add_argument("--seed", default=DEFAULT_SEED, help=f"the draw order's seed (default {DEFAULT_SEED!r})")
    p.add_argument("--max-mutants", type=int, default=0,
                   help="run at most this many mutants in all (0: no cap; CI's cap, with --budget)")
    p.add_argument("--list", action="store_true", help="print the mutants that would run, run none")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the owners' unmutated runs: only right after the whole suite passed "
                        "(CI, after make test); each mutant then has NO_BASELINE_TIMEOUT_S")
    p.add_argument("--python", default=str(config.ROOT / ".venv" / "bin" / "python"))
    return p


def _packages(names: list[str]) -> list[Package]:
    packages = [p for p in load_packages() if not names or p.name in names]
    if names and len(packages) != len(set(names)):
        known = [p.name for p in load_packages()]
        raise ConfigError(f"unknown package in {names}; known: {known}")
    return packages


def _wanted(args: argparse.Namespace, packages: list[Package]) -> dict[str, set[int] | None] | None:
    """File -> the lines to mutate (None: all of them), with the run's first line printed; None when an
    --at names no line of an existing file (said on stderr)."""
    if args.at:
        wanted: dict[str, set[int] | None] = {}
        for spot in args.at:
            f, _, line = spot.rpartition(":")
            if not line.isdigit() or not (config.ROOT / f).is_file():
                print(f"mutate: --at {spot}: expected FILE:LINE of an existing file", file=sys.stderr)
                return None
            wanted.setdefault(f, set()).add(int(line))  # type: ignore[union-attr]
        print(f"generated mutants of {', '.join(args.at)}", flush=True)
    elif args.full:
        wanted = {f: None for p in packages for f in p.files()}
        print(f"generated mutants of every file of {', '.join(p.name for p in packages)}", flush=True)
    else:
        since = args.changed_since or default_since()
        changed = changed_lines(since)
        wanted = {f: lines for f, lines in changed.items()
                  if any(p.owner_of(f) for p in packages) and (config.ROOT / f).exists()}
        print(f"generated mutants of the lines changed since {since[:12]}: {len(wanted)} file(s) in the "
              f"mutation packages", flush=True)
    return wanted


def main(argv: list[str] | None = None, description: str = "Generated mutation testing.") -> int:
    args = parser(description).parse_args(argv)
    started = time.monotonic()
    try:
        packages = _packages(args.package)
        allowed = load_allowed()
    except (ConfigError, OSError, yaml.YAMLError) as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2
    wanted = _wanted(args, packages)
    if wanted is None:
        return 2
    try:
        queue, generated = draw(packages, wanted, args.seed)
    except (ConfigError, subprocess.SubprocessError) as e:
        print(f"mutate: generating mutants: {e}", file=sys.stderr)
        return 2
    tallies = {p.name: Tally(generated=generated[p.name]) for p in packages}
    if args.list:
        for m, pkg, owner in queue:
            if (made := materialize(m)) is not None:
                print(f"{pkg.name}: {made.describe()}  tests: {' '.join(owner.tests)}")
        return 0
    limits = Limits(args.sample, args.budget, args.max_mutants, args.no_baseline, started)
    try:
        run(queue, tallies, allowed, limits, args.python)
    except RunnerBroken as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"\ninterrupted ({type(e).__name__} {e}); every file was restored", file=sys.stderr)
        return 130
    return report(tallies, packages, full=args.full, took=time.monotonic() - started)
