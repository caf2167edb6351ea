#!/usr/bin/env python3
"""A small mutation check: plant one plausible bug at a time and see whether the tests notice.

Each mutation in hack/mutations.yaml names a file, an exact snippet that must occur in it once, the
snippet to put in its place, the tests to run, and optionally a build command (for C code). For each one:
the file is changed in place, the build (if any) and the tests run, and the file is put back, whatever
happens (exception, timeout, Ctrl-C, SIGTERM); a backup beside the file (`.<name>.mutate-orig`) makes even
a killed run recoverable: the next run restores it first. A mutation is "killed" when the tests fail
(or time out), "survived" when they pass. The exit status is 1 if any survived, 2 if a mutation no longer
applies (its snippet is gone: update the entry), 0 otherwise.

    .venv/bin/python hack/mutate.py                 # every mutation
    .venv/bin/python hack/mutate.py --only cel-      # ids starting with "cel-"
    .venv/bin/python hack/mutate.py --list
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "hack" / "mutations.yaml"


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str
    original: str
    mutated: str
    tests: tuple[str, ...]
    why: str = ""
    build: str = ""
    timeout: int = 600


class MutationError(Exception):
    """A mutations file entry that is malformed or no longer applies; names the entry and field."""


def load(path: Path) -> list[Mutation]:
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("mutations"), list):
        raise MutationError(f"{path}: expected a mapping with a 'mutations' list")
    out: list[Mutation] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw["mutations"]):
        where = f"{path}: mutations[{i}]"
        if not isinstance(entry, dict):
            raise MutationError(f"{where}: expected a mapping")
        for key in ("id", "file", "original", "mutated", "tests"):
            if key not in entry:
                raise MutationError(f"{where}.{key}: missing")
        tests = entry["tests"]
        if isinstance(tests, str):
            tests = [tests]
        if not tests or not all(isinstance(t, str) for t in tests):
            raise MutationError(f"{where}.tests: a list of pytest arguments")
        if entry["original"] == entry["mutated"]:
            raise MutationError(f"{where}.mutated: same as original")
        if entry["id"] in seen:
            raise MutationError(f"{where}.id: {entry['id']!r} used twice")
        seen.add(entry["id"])
        out.append(Mutation(
            str(entry["id"]), str(entry["file"]), str(entry["original"]), str(entry["mutated"]), tuple(tests),
            str(entry.get("why", "")), str(entry.get("build", "")), int(entry.get("timeout", 600))))
    return out


def backup_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.mutate-orig")


def restore_leftovers(mutations: list[Mutation]) -> None:
    """A run killed with SIGKILL leaves its backup: put the original back before anything else."""
    for m in mutations:
        target = ROOT / m.file
        backup = backup_of(target)
        if backup.exists():
            os.replace(backup, target)
            print(f"restored {m.file} from a previous interrupted run", flush=True)


class _Interrupted(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    raise _Interrupted(signal.Signals(signum).name)


def run_one(m: Mutation, python: str) -> tuple[str, str]:
    """('killed' | 'survived' | 'stale', detail) for one mutation; the file is restored on return."""
    target = ROOT / m.file
    original = target.read_bytes()
    text = original.decode()
    count = text.count(m.original)
    if count != 1:
        return "stale", f"the original snippet occurs {count} times in {m.file}"
    backup = backup_of(target)
    backup.write_bytes(original)
    try:
        target.write_text(text.replace(m.original, m.mutated))
        start = time.monotonic()
        if m.build:
            built = subprocess.run(m.build, shell=True, cwd=ROOT, capture_output=True, text=True,
                                   timeout=m.timeout, check=False)
            if built.returncode != 0:
                return "killed", f"the build fails ({m.build})"
        cmd = [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *m.tests]
        try:
            result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=m.timeout,
                                    check=False)
        except subprocess.TimeoutExpired:
            return "killed", f"the tests timed out after {m.timeout}s"
        took = time.monotonic() - start
        if result.returncode == 0:
            return "survived", f"tests passed in {took:.0f}s"
        if result.returncode in (4, 5):  # usage error, no tests collected: the entry is wrong
            return "stale", f"pytest exit {result.returncode}: {result.stdout.strip().splitlines()[-1:]}"
        failed = [ln for ln in result.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
        return "killed", (failed[0] if failed else f"pytest exit {result.returncode}") + f" ({took:.0f}s)"
    finally:
        target.write_bytes(original)
        backup.unlink(missing_ok=True)
        if m.build:  # rebuild the original so the tree is as it was
            subprocess.run(m.build, shell=True, cwd=ROOT, capture_output=True, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="the mutations file")
    parser.add_argument("--only", default="", help="run the mutations whose id starts with this")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="the interpreter that runs pytest")
    args = parser.parse_args(argv)
    try:
        mutations = [m for m in load(args.file) if m.id.startswith(args.only)]
    except (MutationError, OSError, yaml.YAMLError) as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2
    if args.list:
        for m in mutations:
            print(f"{m.id}: {m.file}: {m.why}")
        return 0
    restore_leftovers(mutations)
    signal.signal(signal.SIGTERM, _on_signal)
    results: list[tuple[Mutation, str, str]] = []
    try:
        for m in mutations:
            print(f"{m.id}: {m.file} ...", end=" ", flush=True)
            verdict, detail = run_one(m, args.python)
            print(f"{verdict.upper()}: {detail}", flush=True)
            results.append((m, verdict, detail))
    except (KeyboardInterrupt, _Interrupted) as e:
        print(f"\ninterrupted ({type(e).__name__} {e}); every file was restored", file=sys.stderr)
        return 130
    killed = sum(v == "killed" for _, v, _ in results)
    survived = [m.id for m, v, _ in results if v == "survived"]
    stale = [m.id for m, v, _ in results if v == "stale"]
    print(f"\n{killed} of {len(results)} mutations killed"
          + (f"; survived: {', '.join(survived)}" if survived else "")
          + (f"; no longer apply: {', '.join(stale)}" if stale else ""))
    if survived:
        return 1
    return 2 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
