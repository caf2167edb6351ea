"""The environment contract: a claim's limits become CARVE_* variables, validated field by field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.limits import ClaimLimits, DeviceLimit, LimitsError, limiter_env, parse_limiter_env


def limits(*devices: DeviceLimit, **kw) -> ClaimLimits:
    return ClaimLimits(devices=devices, region_path="/var/run/carve/claim/region", **kw)


def test_env_names_every_limited_device_by_ordinal():
    env = limiter_env(limits(DeviceLimit(4 << 30, 30), DeviceLimit(0, 0), DeviceLimit(1 << 30, 0)))
    assert env == {
        "CARVE_REGION": "/var/run/carve/claim/region",
        "CARVE_CORE_POLICY": "default",
        "CARVE_PRIORITY": "high",
        "CARVE_OOM_POLICY": "error",
        "CARVE_MEMORY_LIMIT_0": str(4 << 30),
        "CARVE_CORES_LIMIT_0": "30",
        "CARVE_MEMORY_LIMIT_2": str(1 << 30),
    }


def test_policies_are_passed_through():
    env = limiter_env(limits(DeviceLimit(1, 1), core_policy="force", priority="low", oom_policy="kill"))
    policies = (env["CARVE_CORE_POLICY"], env["CARVE_PRIORITY"], env["CARVE_OOM_POLICY"])
    assert policies == ("force", "low", "kill")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (limits(DeviceLimit(0, 101)), "limits.devices[0].cores_percent"),
        (limits(DeviceLimit(0, 0), DeviceLimit(-1, 0)), "limits.devices[1].memory_bytes"),
        (limits(DeviceLimit(1.5, 0)), "limits.devices[0].memory_bytes"),  # type: ignore[arg-type]
        (limits(DeviceLimit(True, 0)), "limits.devices[0].memory_bytes"),
        (limits(DeviceLimit(0, 0, uuid="GPU-" + "x" * 60)), "limits.devices[0].uuid"),
        (limits(DeviceLimit(0, 0), core_policy="fastest"), "limits.core_policy"),
        (limits(DeviceLimit(0, 0), priority="urgent"), "limits.priority"),
        (limits(DeviceLimit(0, 0), oom_policy="panic"), "limits.oom_policy"),
        (limits(), "limits.devices"),
        (limits(*[DeviceLimit(0, 0)] * 17), "limits.devices"),
        (ClaimLimits(devices=(DeviceLimit(0, 0),), region_path="relative/region"), "limits.region_path"),
    ],
)
def test_invalid_limits_name_the_field(bad, field):
    with pytest.raises(LimitsError) as err:
        limiter_env(bad)
    assert str(err.value).startswith(f"{field}:")


@given(
    st.lists(
        st.tuples(st.integers(0, (1 << 64) - 1), st.integers(0, 100)).map(lambda t: DeviceLimit(*t)),
        min_size=1,
        max_size=16,
    ),
    st.sampled_from(["default", "force", "disable"]),
    st.sampled_from(["high", "low"]),
    st.sampled_from(["error", "kill"]),
)
def test_env_round_trips_for_every_valid_limit(devices, policy, priority, oom):
    original = limits(*devices, core_policy=policy, priority=priority, oom_policy=oom)
    assert parse_limiter_env(limiter_env(original), len(devices)) == original


def test_global_value_applies_where_no_per_device_value_is_set():
    env = {"CARVE_MEMORY_LIMIT": "100", "CARVE_MEMORY_LIMIT_1": "7", "CARVE_REGION": "/r"}
    parsed = parse_limiter_env(env, 2)
    assert [d.memory_bytes for d in parsed.devices] == [100, 7]
