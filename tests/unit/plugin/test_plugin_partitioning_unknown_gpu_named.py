"""A NodePartitioning entry for a GPU this node does not have is a problem in the status that names the
GPU as the entry did: by its index when the entry gives one, by its UUID otherwise, so the admin finds the
entry to fix."""

from __future__ import annotations

from api.v1alpha1.partitioning import parse_node_partitioning
from driver.devices.catalog import fake_node
from driver.plugin.mig.partitioning_state import desired_strategies

GPUS = fake_node("2xA100-80GB", "n1")


def test_an_entry_for_a_gpu_not_on_the_node_names_it_by_index_or_uuid() -> None:
    np = parse_node_partitioning(
        {
            "metadata": {"name": "n1", "generation": 1},
            "spec": {
                "gpus": [
                    {"index": 7, "strategy": "soft"},
                    {"uuid": "GPU-not-on-this-node", "strategy": "mig"},
                    {"index": 1, "strategy": "soft"},
                ]
            },
        }
    )
    got = desired_strategies(np, GPUS, {0: "exclusive", 1: "exclusive"})
    assert got.strategies == {0: "exclusive", 1: "soft"}
    assert got.problems == [
        "spec.gpus[0]: no GPU 7 on this node",
        "spec.gpus[1]: no GPU GPU-not-on-this-node on this node",
    ]
