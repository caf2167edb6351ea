"""A NodePartitioning may give a GPU without MIG support any strategy but mig (driver/plugin/mig/
partitioning_state.py, `desired_strategies`): on a T4 an `exclusive` or `soft` entry is taken as asked, with
no problem in the status; only a `mig` entry is refused, naming the GPU, and the GPU keeps its default."""

from __future__ import annotations

import pytest

from api.v1alpha1.partitioning import parse_node_partitioning
from driver import names
from driver.devices.catalog import fake_node
from driver.plugin.mig.partitioning_state import desired_strategies

GPUS = fake_node("1xA100-80GB,1xT4", "n1")  # gpu-1, the T4, has no MIG support


def _np(strategy: str):
    return parse_node_partitioning(
        {"metadata": {"name": "n1", "generation": 1}, "spec": {"gpus": [{"index": 1, "strategy": strategy}]}}
    )


@pytest.mark.parametrize(
    "strategy", [names.STRATEGY_EXCLUSIVE, names.STRATEGY_SOFT, names.STRATEGY_TIMESLICE, names.STRATEGY_MPS]
)
def test_a_gpu_without_mig_takes_every_other_strategy(strategy: str) -> None:
    got = desired_strategies(_np(strategy), GPUS, {0: "soft", 1: "slots"})
    assert (got.strategies, got.problems) == ({0: "soft", 1: strategy}, [])


def test_a_gpu_without_mig_refuses_mig_and_keeps_its_default() -> None:
    got = desired_strategies(_np(names.STRATEGY_MIG), GPUS, {0: "soft", 1: "slots"})
    assert got.strategies == {0: "soft", 1: "slots"}
    assert len(got.problems) == 1 and "has no MIG support" in got.problems[0], got.problems
