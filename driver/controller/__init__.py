"""The strategy controller: the planner (pure; planner.py with plan.py, demand.py, sizing.py,
hysteresis.py and consolidate.py; nodes.py, inputs.py) that picks each idle GPU's strategy from what
pending claims ask for, and `carve controller` (command.py, reconcile.py, leader.py, metrics.py; its
informers are driver/cluster/informer.py) that watches the cluster, runs the planner and writes
NodePartitioning specs. See docs/controller.md.
"""
