"""The hook's JSON reader (native/hook/json.c) under a bounded fuzz run with ASan and UBSan.

native/build/fuzz/json_fuzz runs the libFuzzer-compatible target (native/hook/fuzz/json_fuzz.c) over the
corpus and then over mutations of it. A seed is drawn per run (printed on failure; CARVE_FUZZ_SEED fixes
it) so every run explores new inputs; the failing input is kept in the test's tmp dir.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FUZZ = REPO / "native/build/fuzz/json_fuzz"
CORPUS = sorted((REPO / "native/hook/fuzz/corpus").glob("*.json"))
ITERATIONS = int(os.environ.get("CARVE_FUZZ_ITERATIONS", "40000"))  # a few seconds under the sanitizers


def test_the_json_reader_survives_mutated_documents(tmp_path):
    if not FUZZ.exists():
        pytest.fail(f"{FUZZ} missing: run `make native`")
    assert CORPUS, "native/hook/fuzz/corpus is empty"
    seed = int(os.environ.get("CARVE_FUZZ_SEED") or random.randrange(1, 2**63))
    env = {**os.environ, "FUZZ_CRASH_DIR": str(tmp_path), "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"}
    done = subprocess.run(
        [str(FUZZ), str(ITERATIONS), str(seed), *map(str, CORPUS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, f"seed {seed}, input in {tmp_path}/crash-input:\n{done.stderr[-4000:]}"
    assert f"{ITERATIONS} mutations, no failure" in done.stdout
