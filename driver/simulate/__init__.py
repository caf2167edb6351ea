"""`carve simulate`: replay a workload trace on a modelled cluster under each sharing strategy.

inputs.py (cluster.yaml / trace.yaml, pydantic at the boundary), generator.py (seeded synthetic traces),
cluster.py (nodes, slices from driver.devices, one driver.allocator.Allocator per node), policies.py
(kube spread / binpack), engine.py (the discrete-event loop), demand.py (pod demand, lower bound),
report.py (table / JSON), command.py (the CLI wiring). See docs/simulate.md.
"""
