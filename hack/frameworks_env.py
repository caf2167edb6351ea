#!/usr/bin/env python3
"""The framework environment of `make test-frameworks`: a venv with the real CUDA runtimes, CuPy and PyTorch.

Prints the path of its python. The venv lives outside the repo, keyed by a hash of the pinned requirements
file and the interpreter's version (`${XDG_CACHE_HOME:-~/.cache}/carve/frameworks-<hash>`), so every clone
on the machine reuses it and a changed pin builds a new one; CARVE_FRAMEWORKS_ENV overrides the place.
Building takes a lock (two clones starting at once build it once) and writes a stamp last: a build cut
short is thrown away and redone, never reused half-installed. The wheels are 2.8 GB, so they stay out of
the repo's .venv and out of `make test`'s own set-up. A machine without PyPI (a lent GPU node) installs from a
directory of wheels that `pip download -r tests/frameworks/requirements.txt -d DIR` filled elsewhere:
CARVE_FRAMEWORKS_WHEELHOUSE=DIR.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "tests" / "frameworks" / "requirements.txt"
STAMP = ".carve-frameworks-complete"


class EnvError(Exception):
    """The framework environment cannot be built; the message says which step and why."""


def env_dir(requirements: Path) -> Path:
    override = os.environ.get("CARVE_FRAMEWORKS_ENV")
    if override:
        return Path(override)
    key = hashlib.sha256(requirements.read_bytes() + sys.version.split()[0].encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "carve" / f"frameworks-{key}"


def run(step: str, *cmd: str) -> None:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise EnvError(f"{step} failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}")


def build(target: Path, requirements: Path) -> None:
    if target.exists():
        shutil.rmtree(target)  # a build cut short: no stamp, never reused
    start = time.monotonic()
    print(f"frameworks env: building {target} from {requirements}", file=sys.stderr)
    run("creating the venv", sys.executable, "-m", "venv", str(target))
    py = str(target / "bin" / "python")
    pip = (py, "-m", "pip", "install", "-q", "--disable-pip-version-check")
    if not os.environ.get("CARVE_FRAMEWORKS_WHEELHOUSE") and not os.environ.get("PIP_NO_INDEX"):
        run("upgrading pip", *pip, "-U", "pip")
    wheelhouse = os.environ.get("CARVE_FRAMEWORKS_WHEELHOUSE")  # an offline machine: `pip download` made it
    offline = ("--no-index", "--find-links", wheelhouse) if wheelhouse else ()
    run(f"installing {requirements.name}", *pip, *offline, "-r", str(requirements))
    (target / STAMP).write_text(requirements.read_text())
    print(f"frameworks env: built in {time.monotonic() - start:.0f} s", file=sys.stderr)


def ensure(requirements: Path = REQUIREMENTS) -> Path:
    """The python of a complete framework environment, built first when missing."""
    target = env_dir(requirements)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / STAMP).exists():
            build(target, requirements)
    return target / "bin" / "python"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requirements", type=Path, default=REQUIREMENTS)
    args = ap.parse_args()
    try:
        print(ensure(args.requirements.resolve()))
    except EnvError as e:
        print(f"frameworks env: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
