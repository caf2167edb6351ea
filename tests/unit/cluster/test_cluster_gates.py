"""Which fields a server drops when DRA feature gates are off."""

from __future__ import annotations

import pytest

from driver.cluster.gates import (
    ALPHA_GATES_1_34,
    GATED_FIELDS,
    drop_disabled_fields,
    fields_of_disabled_gates,
)


def full_slice() -> dict:
    return {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.carve.dev",
            "nodeName": "n",
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}},
                    "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
                    "taints": [{"key": "k", "effect": "NoSchedule"}],
                    "bindsToNode": True,
                }
            ],
        },
    }


def test_nothing_is_dropped_without_drop_fields() -> None:
    assert drop_disabled_fields(full_slice(), frozenset()) == full_slice()


def test_consumable_capacity_gate_drops_multi_allocation_and_request_policy_only() -> None:
    out = drop_disabled_fields(full_slice(), fields_of_disabled_gates(["DRAConsumableCapacity"]))
    device = out["spec"]["devices"][0]
    assert "allowMultipleAllocations" not in device
    assert device["capacity"] == {"memory": {"value": "80Gi"}}
    assert "consumesCounters" in device and "sharedCounters" in out["spec"]


def test_partitionable_gate_drops_counters_at_both_levels() -> None:
    out = drop_disabled_fields(full_slice(), fields_of_disabled_gates(["DRAPartitionableDevices"]))
    assert "sharedCounters" not in out["spec"]
    assert "consumesCounters" not in out["spec"]["devices"][0]
    assert out["spec"]["devices"][0]["allowMultipleAllocations"] is True


def test_all_alpha_gates_of_1_34_leave_a_plain_slice() -> None:
    out = drop_disabled_fields(full_slice(), fields_of_disabled_gates(ALPHA_GATES_1_34))
    assert out["spec"]["devices"] == [{"name": "gpu-0", "capacity": {"memory": {"value": "80Gi"}}}]
    assert set(out["spec"]) == {"driver", "nodeName", "pool", "devices"}


def test_input_is_left_alone() -> None:
    obj = full_slice()
    drop_disabled_fields(obj, fields_of_disabled_gates(ALPHA_GATES_1_34))
    assert obj == full_slice()


def test_unknown_gate_is_an_error() -> None:
    with pytest.raises(ValueError, match="DRAFancy"):
        fields_of_disabled_gates(["DRAFancy"])


def test_every_gate_lists_fields() -> None:
    assert all(GATED_FIELDS[g] for g in ALPHA_GATES_1_34)
