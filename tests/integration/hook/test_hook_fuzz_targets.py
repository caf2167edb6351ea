"""The hook's parsers of tenant files, and its contained lookups in a hostile image, under a bounded fuzz
run with ASan and UBSan (issue 30).

Each target (native/hook/fuzz/*_fuzz.c, libFuzzer-compatible, run by fuzz_driver.c's mutating driver) gets
the corpus of its own folder, then mutations of it, for FUZZ_SECONDS (CARVE_FUZZ_SECONDS, default 3) or
CARVE_FUZZ_ITERATIONS, whichever ends first. A seed is drawn per run (printed on failure; CARVE_FUZZ_SEED
fixes it); the failing input is kept in the test's tmp dir. docs/security.md lists what each one checks.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "native/build/fuzz"
CORPUS = REPO / "native/hook/fuzz/corpus"
SECONDS = int(os.environ.get("CARVE_FUZZ_SECONDS", "3"))
ITERATIONS = int(os.environ.get("CARVE_FUZZ_ITERATIONS", "2000000"))
LEAST = min(100, ITERATIONS)


@pytest.mark.parametrize(
    "target, corpus",
    [
        ("preload_fuzz", "preload"),  # the image's /etc/ld.so.preload (preload sub-command)
        ("ldcache_fuzz", "ldcache"),  # the ld.so.cache ldconfig wrote from the image's libraries
        ("mpsuser_fuzz", "mpsuser"),  # mps-user: the control's pid replies, /proc/<pid>/status and stat
        ("memlimits_fuzz", "memlimits"),  # memory-limits: state pid, /proc/<pid>/cgroup, --limit sizes, id
        # A hostile image's tree (symlinks out, "..", /proc links, loops) and create-symlinks' arguments, each
        # input building a container root on a private tmpfs (contain_fuzz.c).
        ("contain_fuzz", "contain"),
    ],
)
def test_a_tenant_file_parser_survives_mutated_inputs(target, corpus, tmp_path):
    program = BUILD / target
    if not program.exists():
        pytest.fail(f"{program} missing: run `make native`")
    seeds = sorted((CORPUS / corpus).iterdir())
    assert seeds, f"{CORPUS / corpus} is empty"
    seed = int(os.environ.get("CARVE_FUZZ_SEED") or random.randrange(1, 2**63))
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),  # contain_fuzz's container roots
        "FUZZ_CRASH_DIR": str(tmp_path),
        "FUZZ_SECONDS": str(SECONDS),
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
    }
    done = subprocess.run(
        [str(program), str(ITERATIONS), str(seed), *map(str, seeds)],
        capture_output=True,
        text=True,
        errors="replace",  # the hook's messages quote the tenant's bytes
        env=env,
        timeout=SECONDS * 20 + 60,
    )
    assert done.returncode == 0, (
        f"{target} seed {seed}, input in {tmp_path}/crash-input:\n{done.stderr[-4000:]}"
    )
    assert "mutations, no failure" in done.stdout, done.stdout
    mutations = int(done.stdout.split(" corpus inputs, ")[1].split()[0])
    # That it fuzzed at all, not how fast: a loaded 2-core machine runs a few hundred inputs of a target in
    # 3 s where an idle one runs thousands (docs/security.md).
    assert mutations >= LEAST, f"{target} ran only {mutations} mutations in {SECONDS}s: {done.stdout}"
