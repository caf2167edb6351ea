"""The e2e's per-minor settings (e2e/cluster/versions.py): the feature gates each minor gets, and the gates a
minor locks on, which GATES=off must leave alone or refuse."""

from __future__ import annotations

import pytest

from e2e.cluster import versions
from e2e.cluster.versions import Version, resolve


def test_every_minor_directory_resolves_to_its_pinned_patch():
    assert resolve("1.37").patch == "v1.37.2"
    assert resolve("1.36").patch == "v1.36.3"
    assert "1.37" in versions.minors()


def test_gates_on_needs_no_gate_from_1_36_and_the_four_alpha_gates_before():
    assert Version("1.37", "v1.37.2", True).feature_gates() == {}
    assert Version("1.36", "v1.36.3", True).feature_gates() == {}
    assert Version("1.35", "v1.35.4", True).feature_gates() == dict.fromkeys(versions.ALPHA_DRA_GATES, True)


def test_gates_off_on_1_37_leaves_the_locked_gate_alone_and_turns_dependents_off():
    # DRAExtendedResource is GA and LockToDefault in v1.37.2: setting it false stops every component;
    # DRADeviceTaintRules (GA, on) depends on DRADeviceTaints: left on, the API server refuses to start.
    gates = resolve("1.37", "off").feature_gates()
    assert gates == {
        "DRAConsumableCapacity": False,
        "DRAPartitionableDevices": False,
        "DRADeviceTaints": False,
        "DRAFractionalCapacityRange": False,
        "DRADeviceTaintRules": False,
    }
    assert resolve("1.37", "off").gates_flag() == [
        "--feature-gates=DRAConsumableCapacity=false,DRAPartitionableDevices=false,DRADeviceTaints=false,"
        "DRAFractionalCapacityRange=false,DRADeviceTaintRules=false"
    ]
    # 1.36 locks none of the four and has no dependent on by default.
    assert Version("1.36", "v1.36.3", False).feature_gates() == dict.fromkeys(versions.ALPHA_DRA_GATES, False)


def test_a_minor_that_locks_partitionable_devices_on_refuses_gates_off():
    later = Version("1.38", "v1.38.0-beta.0", False)
    assert {"DRAPartitionableDevices", "DRADeviceTaints"} <= later.locked_on
    assert later.feature_gates() == {"DRAConsumableCapacity": False, "DRAFractionalCapacityRange": False}
    assert Version("1.39", "v1.39.0", True).locked_on == later.locked_on  # the newest known locks hold
    if (versions.CLUSTER_DIR / "1.38" / "go.mod").exists():
        with pytest.raises(ValueError, match=r"locks DRAPartitionableDevices on: GATES=off .* cannot be run"):
            resolve("1.38", "off")


def test_unknown_minor_and_gates_value_are_errors():
    with pytest.raises(ValueError, match=r"no e2e/cluster/1.99/go.mod: known minors are 1.3"):
        resolve("1.99")
    with pytest.raises(ValueError, match="gates must be 'on' or 'off'"):
        resolve("1.37", "maybe")
