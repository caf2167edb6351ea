"""Selectors that make cel-python itself fail, as a claim's author sees them: a macro whose variable is not
a name (the compiled runner's transpiler refuses it, the interpreted one fails while evaluating it with a
plain Python error) is that claim's CEL error, worded with the Python error, and the claims beside it are
allocated as usual."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, devices_of, exactly, slice_

from driver.allocator import cel
from driver.allocator.allocator import Allocator, Unallocatable

# has() sends a selector to the interpreted runner (cel.py: the compiled one gets `!has` wrong)
INTERPRETED = f'has(device.attributes["{DRIVER}"].type) && [1, 2].map(x, x, x) == [1]'
TRANSPILED = "[1, 2].exists(1, true)"


def test_a_transpiler_refusal_is_a_compile_error_naming_the_python_error():
    with pytest.raises(cel.CelError) as refused:
        cel.compile_selector(TRANSPILED, compiled=True)
    assert str(refused.value) == ("CEL compile error: ValueError: too many values to unpack (expected 2) "
                                  f"(expression: {TRANSPILED})")


def test_a_plain_python_error_while_evaluating_is_a_runtime_error_naming_it():
    program = cel.compile_selector(INTERPRETED)
    assert program.compiled is False
    device = cel.device_value(DRIVER, {"type": {"string": "gpu"}}, {}, False)
    with pytest.raises(cel.CelError) as failed:
        program.evaluate(device)
    assert str(failed.value) == ("CEL runtime error: ValueError: too many values to unpack (expected 2) "
                                 f"(expression: {INTERPRETED})")


@pytest.mark.parametrize("selector", [INTERPRETED, TRANSPILED], ids=["evaluating", "compiling"])
def test_such_a_selector_fails_only_its_own_claim(selector):
    a = Allocator([slice_("a", [dev("g0"), dev("g1")])], CLASSES)
    with pytest.raises(Unallocatable, match="ValueError: too many values to unpack"):
        a.allocate(claim("bad", exactly("r", selectors=[selector])))
    good = a.allocate(claim("good", exactly("r", count=2)))
    assert devices_of(good) == [("r", "n1", "g0"), ("r", "n1", "g1")]
