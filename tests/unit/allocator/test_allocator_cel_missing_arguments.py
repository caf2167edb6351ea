"""A library function called without the arguments it needs (`s.replace()`, `join()`) is an ordinary
runtime error of that selector, "no such overload", whether called as a method or as a function: the
compile-time cost estimate, which reads the operands it is given, does not trip over the missing ones."""

from __future__ import annotations

import pytest

from driver.allocator import cel

DRIVER = "gpu.carve.dev"
TYPE = f'device.attributes["{DRIVER}"].type'
CALLS = [f'{TYPE}.replace() == ""', f'{TYPE}.replace("g") == ""', 'replace() == ""', f"{TYPE}.matches()",
         "matches()", f'{TYPE}.find() == ""', 'find() == ""', f"{TYPE}.findAll() == []", "findAll() == []",
         f"{TYPE}.split() == []", "split() == []", 'join() == ""', f'{TYPE}.indexOf() == 0', "indexOf() == 0",
         'lowerAscii() == ""']


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "interpreted"])
@pytest.mark.parametrize("expression", CALLS)
def test_a_call_without_its_arguments_is_a_runtime_error(expression, compiled):
    program = cel.compile_selector(expression, compiled)
    with pytest.raises(cel.CelError) as failed:
        program.evaluate(cel.device_value(DRIVER, {"type": {"string": "gpu"}}, {}, False))
    assert str(failed.value) == f"CEL runtime error: no such overload (expression: {expression})"
