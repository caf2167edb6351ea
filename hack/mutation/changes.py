"""What changed: the lines added or changed since a ref (`git diff -U0`), and the ref CI compares with."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from . import config


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=config.ROOT, capture_output=True, text=True, check=True).stdout


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
