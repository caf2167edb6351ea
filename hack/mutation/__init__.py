"""Generated mutation testing (hack/mutate_generated.py is its command line; docs/testing.md, "Generated
mutants"). One module one job:

    config      hack/mutation_packages.yaml and hack/mutants_allowed.yaml: packages, owners, allowed survivors
    mutant      what a mutant is (file, line, before and after, the whole mutated text)
    cosmic      the Python mutants: cosmic-ray's operators, made when drawn
    universal   the C mutants: universalmutator's rules
    changes     the lines changed since a ref (git diff), and which ref CI compares with
    draw        the draw: each mutant's place by a hash of the seed and the mutant, files interleaved
    execute     one mutant in place against its owner's tests, the file always put back; the per-package lock
    score       the tally per package, its 95% interval, the report and the exit status
    session     the run: the baselines, the budget, the sample
    cli         the flags, what to mutate, the exit codes

Every module reads the repository root as `config.ROOT` when called, so a test can point it elsewhere.
"""
