"""Every device a limits file lists is checked, not only its first (limits.c, validate: the loop over
`device_count`): a field out of range on its second device fails the claim closed as one on its first does
(test_limiter_limits_fields.py), and the limiter names the field."""

from __future__ import annotations

import pytest

from driver.limits.limitsfile import LimitsStruct

MIB = 1 << 20


@pytest.mark.parametrize(("field", "value"), [("cores_limit", 101), ("uuid", b"GPU-" + b"f" * 44)])
def test_a_field_out_of_range_on_the_second_device_fails_closed(claim, field: str, value: object) -> None:
    c = claim().create(memory=64 * MIB)
    s = LimitsStruct.from_buffer_copy(c.limits.read_bytes())
    s.device_count = 2
    s.devices[1].memory_limit = 64 * MIB
    setattr(s.devices[1], field, value)
    assert getattr(s.devices[1], field) == value  # a full 48-byte uuid: no NUL within its field
    c.limits.unlink()
    c.limits.write_bytes(bytes(s))
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T", timeout=20)
    assert out.stdout.strip() == "2", out.stderr  # never open: nothing can be allocated
    assert f"limits {c.limits}" in out.stderr and "device field out of range" in out.stderr, out.stderr
