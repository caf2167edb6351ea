"""A limits file whose fields are out of range fails closed, and the limiter says which field: a device
count of 0 or past CARVE_MAX_DEVICES (16), a policy past its table (survivors of generated mutants in
native/src/limits.c: the check dropped, or its reason emptied)."""

from __future__ import annotations

import pytest

from driver.limits.env import MAX_DEVICES
from driver.limits.limitsfile import LimitsStruct

MIB = 1 << 20


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("device_count", 0, "device count out of range"),
        ("device_count", MAX_DEVICES + 1, "device count out of range"),
        ("oom_policy", 7, "policy out of range"),
    ],
)
def test_a_limits_field_out_of_range_fails_closed_naming_it(claim, field, value, reason):
    c = claim().create(memory=64 * MIB)
    s = LimitsStruct.from_buffer_copy(c.limits.read_bytes())
    setattr(s, field, value)
    c.limits.unlink()
    c.limits.write_bytes(bytes(s))
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T", timeout=20)
    assert out.stdout.strip() == "2", out.stderr  # never open: nothing can be allocated
    assert f"limits {c.limits}" in out.stderr and reason in out.stderr, out.stderr


def test_sixteen_devices_are_a_valid_limits_file(claim):
    c = claim().create(memory=64 * MIB)
    s = LimitsStruct.from_buffer_copy(c.limits.read_bytes())
    s.device_count = MAX_DEVICES
    for d in range(1, MAX_DEVICES):
        s.devices[d].memory_limit = 64 * MIB
    c.limits.unlink()
    c.limits.write_bytes(bytes(s))
    out = c.run("alloc", str(1 * MIB), timeout=20)
    assert out.stdout.strip() == "0", out.stderr
    assert "refused" not in out.stderr


# A device's fields: a cores limit is a percentage (100 at most), and its UUID a NUL-terminated string within
# its 48 bytes (the limiter compares it as a string with the driver's).
@pytest.mark.parametrize(
    ("field", "value"),
    [("cores_limit", 101), ("uuid", b"GPU-" + b"f" * 44)],
)
def test_a_device_field_out_of_range_fails_closed_naming_it(claim, field, value):
    c = claim().create(memory=64 * MIB)
    s = LimitsStruct.from_buffer_copy(c.limits.read_bytes())
    setattr(s.devices[0], field, value)
    assert getattr(s.devices[0], field) == value  # a full 48-byte uuid: no NUL within its field
    c.limits.unlink()
    c.limits.write_bytes(bytes(s))
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T", timeout=20)
    assert out.stdout.strip() == "2", out.stderr  # never open: nothing can be allocated
    assert f"limits {c.limits}" in out.stderr and "device field out of range" in out.stderr, out.stderr


def test_a_cores_limit_of_100_is_a_valid_limits_file(claim):
    c = claim().create(memory=64 * MIB)
    s = LimitsStruct.from_buffer_copy(c.limits.read_bytes())
    s.devices[0].cores_limit = 100
    c.limits.unlink()
    c.limits.write_bytes(bytes(s))
    out = c.run("alloc", str(1 * MIB), timeout=20)
    assert out.stdout.strip() == "0", out.stderr
    assert "refused" not in out.stderr
