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
configuration or baseline problem, 130 interrupted.

The command line only: the runner is the package hack/mutation/ (one module one job, its __init__ lists them).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hack/mutation, also when loaded by path

from mutation.cli import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__.split("\n\n")[0]))
