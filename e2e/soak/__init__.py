"""`make soak`: pods of every kind carve serves, created and deleted at a steady rate on the local cluster of
the e2e (real API server, scheduler, controller manager, kubelets, containerd + runc), while a seeded fault
injector kills and restarts components; invariants are checked during the run and at its end.

workload.py makes the pods, faults.py breaks things, invariants.py checks what must hold, __main__.py runs
it all and prints `soak: <pods> pods, <faults> faults, <violations> violations` (exit 1 on any violation).
docs/reliability.md has the figures of a long run and what is not injected yet.
"""
