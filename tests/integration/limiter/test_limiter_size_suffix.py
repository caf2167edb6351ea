"""A size's unit is K, M, G or T, then an optional i, then an optional B (b): any other letter after the unit
makes the value no size (logged, no limit), as docs/limiter.md says; "8Mx" is not 8 MiB."""

from __future__ import annotations

import json

import pytest

MIB = 1 << 20


@pytest.mark.parametrize("value", ["8Mx", "8Mc", "8Mib2"])
def test_a_letter_after_the_unit_makes_the_value_no_size(claim, value):
    c = claim(gpus="1xT4")
    proc = c.run("multi", CARVE_REGION="", CARVE_MEMORY_LIMIT_0=value)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["total"][0] > 8 * MIB  # no limit: the GPU's own memory
    assert f"memory limit '{value}' for device 0 is not a size; no memory limit" in proc.stderr


def test_the_unit_with_its_optional_i_and_b_is_a_size(claim):
    c = claim(gpus="1xT4")
    proc = c.run("multi", CARVE_REGION="", CARVE_MEMORY_LIMIT_0="8MiB")
    assert json.loads(proc.stdout.strip().splitlines()[-1])["total"][0] == 8 * MIB, proc.stderr
