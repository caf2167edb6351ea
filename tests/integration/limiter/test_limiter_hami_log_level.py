"""HAMi's log level variable (LIBCUDA_LOG_LEVEL, 0 errors .. 4 debug) sets the limiter's level when CARVE_LOG
is empty (config.c, log_level_from_env); whatever number it holds, the limiter's errors are still logged: an
operator who copied a HAMi pod spec must still see why an allocation is refused.

A number past int's range is one a typo makes: glibc's atoi is strtol cast to int, so 4294967295 and
99999999999999999999 (strtol's LONG_MAX) both read as -1, which the limiter takes as "errors only", as 0.
"""

from __future__ import annotations

import re

import pytest

MIB = 1 << 20


def broken_claim(claim):
    """A claim whose region file is garbage: the limiter logs an error naming it, and goes on."""
    c = claim().create(memory=64 * MIB)
    c.region.unlink()
    c.region.write_bytes(b"x" * 4096)
    return c


@pytest.mark.parametrize("value", ["0", "1", "4", "4294967295", "99999999999999999999"])
def test_every_hami_log_level_keeps_the_limiters_errors(claim, value):
    c = broken_claim(claim)
    out = c.run("alloc", str(1 * MIB), CARVE_LOG="", LIBCUDA_LOG_LEVEL=value)
    assert re.search(r"^carve-limiter\[\d+\] error: region .*", out.stderr, re.M), out.stderr


@pytest.mark.parametrize(("value", "debug"), [("0", False), ("4294967295", False), ("3", True), ("4", True)])
def test_hami_levels_3_and_up_are_debug_and_0_or_less_errors_only(claim, value, debug):
    c = claim().create(memory=64 * MIB)
    out = c.run("alloc", str(1 * MIB), CARVE_LOG="", LIBCUDA_LOG_LEVEL=value)
    assert out.stdout.strip() == "0", out.stderr
    # binding the device to the claim is a debug trace
    traced = re.search(r"^carve-limiter\[\d+\] debug: device 0 \(", out.stderr, re.M) is not None
    assert traced == debug, out.stderr
