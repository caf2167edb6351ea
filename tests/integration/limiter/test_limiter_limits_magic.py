"""A limits file whose magic is not carve's ("CARVELIM") is no limits file: the claim fails closed and the
limiter says why (limits.c, validate). Any other value is refused, below the magic as above it: a file of
zeros, or another tool's header, is not carve's limits whichever way its first word compares."""

from __future__ import annotations

import pytest

from driver.limits.limitsfile import LIMITS_MAGIC, LimitsStruct

MIB = 1 << 20


@pytest.mark.parametrize("magic", [0, LIMITS_MAGIC - 1, LIMITS_MAGIC + 1, (1 << 64) - 1])
def test_a_limits_file_with_another_magic_fails_closed_naming_it(claim, magic):
    c = claim().create(memory=64 * MIB)
    s = LimitsStruct.from_buffer_copy(c.limits.read_bytes())
    s.magic = magic
    c.limits.unlink()
    c.limits.write_bytes(bytes(s))
    out = c.run("alloc", str(1 * MIB), CARVE_MEMORY_LIMIT="1T", timeout=20)
    assert out.stdout.strip() == "2", out.stderr  # never open: nothing can be allocated
    assert f"limits {c.limits} bad magic (not a carve limits file)" in out.stderr, out.stderr
