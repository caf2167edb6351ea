"""The simulator tests' fixture; their cluster and trace helpers are in support/simulate_cluster.py."""

from __future__ import annotations

import pytest

from driver.simulate.command import simulate
from driver.simulate.engine import SimResult
from driver.simulate.inputs import NodeGroup, TracePod


@pytest.fixture
def run():
    """run(groups, pods, strategy='auto', policy='kube') -> SimResult."""

    def go(groups: list[NodeGroup], pods: list[TracePod], strategy: str = "auto",
           policy: str = "kube") -> SimResult:
        return simulate(groups, pods, strategy, policy)

    return go
