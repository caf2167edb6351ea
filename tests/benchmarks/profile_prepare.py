"""Profile one soft-slice prepare in process (issue 30's third pass, docs/performance.md): a warm
`Preparer` (tests/support/prepare_bench.py) prepares N fresh claims one after another under cProfile, then
N more unprofiled; prints the CPU per prepare (user and system) and the top functions.

    .venv/bin/python tests/benchmarks/profile_prepare.py [cumulative|tottime] [N] [directory]

Not collected by pytest (no test_ prefix): a tool, not a benchmark. The directory (default: a new one
under the system's temporary directory) decides the filesystem the claims' files go to, which is most of
a prepare's system CPU on a disk.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support.*
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: driver.*

from support.prepare_bench import InProcessNode, soft_results


def per_prepare(node: InProcessNode, refs: list, profile: cProfile.Profile | None = None) -> str:
    before, t0 = os.times(), time.perf_counter()
    if profile:
        profile.enable()
    for ref in refs:
        error = node.prepare_one(ref)
        assert not error, error
    if profile:
        profile.disable()
    after, t1 = os.times(), time.perf_counter()
    node.unprepare(refs)
    n = len(refs)
    user, system, wall = (after.user - before.user) / n, (after.system - before.system) / n, (t1 - t0) / n
    return f"user {user * 1e3:.3f} ms, system {system * 1e3:.3f} ms, wall {wall * 1e3:.3f} ms per prepare"


def main() -> None:
    sort = sys.argv[1] if len(sys.argv) > 1 else "cumulative"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    root = Path(tempfile.mkdtemp(prefix="profile-prepare-", dir=sys.argv[3] if len(sys.argv) > 3 else None))
    node = InProcessNode(root / "node", root / "stubs", region_fs="auto")
    warm = [node.put_claim(f"warm-{i}", soft_results(i)) for i in range(20)]
    per_prepare(node, warm)
    profile = cProfile.Profile()
    profiled = per_prepare(node, [node.put_claim(f"p-{i}", soft_results(i)) for i in range(n)], profile)
    plain = per_prepare(node, [node.put_claim(f"u-{i}", soft_results(i)) for i in range(n)])
    print(f"profiled: {profiled}\nunprofiled: {plain}\ndirectory: {root}")
    shutil.rmtree(root, ignore_errors=True)
    pstats.Stats(profile).sort_stats(sort).print_stats(40)


if __name__ == "__main__":
    main()
