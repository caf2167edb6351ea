"""The simulator tests' fixture; their cluster and trace helpers are in support/simulate_cluster.py."""

from __future__ import annotations

import pytest

from driver.simulate.command import simulate, simulate_once
from driver.simulate.engine import SimResult
from driver.simulate.inputs import NodeGroup, TracePod


@pytest.fixture
def run():
    """run(groups, pods, strategy='auto', policy='kube') -> SimResult; strategy `planner`: the reactive
    planner alone (one run), where `auto` runs every candidate layout and keeps the winner."""

    def go(groups: list[NodeGroup], pods: list[TracePod], strategy: str = "auto",
           policy: str = "kube") -> SimResult:
        if strategy == "planner":
            return simulate_once(groups, pods, "auto", policy)
        return simulate(groups, pods, strategy, policy)

    return go
