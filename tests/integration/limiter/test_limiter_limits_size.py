"""A limits file is exactly one layout long: a longer one (bytes appended, or a layout this limiter does not
know that happens to begin like its own) is refused, naming the file and the size, and the claim fails
closed, as a truncated one is (test_limiter_escape.py). So is a file of the right length whose own size
field says another layout, larger or smaller."""

from __future__ import annotations

import pytest

from driver.limits.limitsfile import LIMITS_SIZE, LimitsStruct

MIB = 1 << 20


def test_a_limits_file_longer_than_its_layout_fails_closed(claim):
    c = claim().create(memory=64 * MIB)
    data = c.limits.read_bytes()
    c.limits.unlink()
    c.limits.write_bytes(data + bytes(8))  # the plugin's own file, eight zero bytes longer
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T", timeout=20)
    assert out.stdout.strip() == "2", out.stderr  # never open: nothing can be allocated
    assert f"limits {c.limits} size does not match this layout" in out.stderr


@pytest.mark.parametrize("delta", [8, -8])
def test_a_limits_file_whose_size_field_names_another_layout_fails_closed(claim, delta):
    c = claim().create(memory=64 * MIB)
    data = bytearray(c.limits.read_bytes())
    offset = LimitsStruct.size.offset
    data[offset : offset + 8] = (LIMITS_SIZE + delta).to_bytes(8, "little")
    c.limits.unlink()
    c.limits.write_bytes(bytes(data))  # the file's length still this layout's
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T", timeout=20)
    assert out.stdout.strip() == "2", out.stderr
    assert f"limits {c.limits} size field does not match this layout" in out.stderr
