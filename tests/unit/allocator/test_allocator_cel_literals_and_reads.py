"""How a selector's literals and device accesses are recognised (cel_ast): which literals the fast path
folds (plain strings in either quote, decimal ints within int64, booleans) and which it leaves to
cel-python (escapes, hex, past int64), and each spelling of a device read, with the same answers either
way."""

from __future__ import annotations

import pytest
from support.decoded import read_slice

from driver.allocator import cel
from driver.allocator.cel_ast import Read
from driver.allocator.cel_cache import SelectorCache

D = "gpu.carve.dev"
A = f'device.attributes["{D}"]'

(DEV,) = read_slice({"metadata": {"name": "s"}, "spec": {
    "driver": D, "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
    "devices": [{"name": "g0", "attributes": {"name": {"string": "a1"}, "n": {"int": 2**63 - 1},
                                              "m": {"int": -(2**63)}, "z": {"int": 7},
                                              "flag": {"bool": False}},
                 "capacity": {"memory": {"value": "1Gi"}}}]}}).devices


def answer(expression):
    try:
        return SelectorCache().matches(expression, DEV)
    except cel.CelError as e:
        return e.message


@pytest.mark.parametrize(("expression", "fast", "expected"), [
    (f'{A}.name == "a1"', True, True),
    (f"{A}.name == 'a1'", True, True),
    (f'{A}.name == ""', True, False),
    (f'{A}.name == "a\\u0031"', False, True),  # an escape: cel-python reads it
    (f"{A}.name == r'a1'", False, True),  # a raw string
    (f"{A}.n == 9223372036854775807", True, True),
    (f"{A}.m == -9223372036854775808", True, True),
    (f"{A}.z == 7", True, True),
    (f"{A}.z == 0x7", False, True),  # hex
    (f"{A}.z == -7", True, False),
    (f"{A}.flag == false", True, True),
    (f"{A}.flag == true", True, False),
    (f"{A}.flag", True, False),
])
def test_literals_the_fast_path_folds_and_those_it_leaves(expression, fast, expected):
    assert (cel.compile_selector(expression).fast is not None) is fast
    assert answer(expression) is expected


def test_an_int_literal_past_int64_is_cel_pythons_to_refuse():
    expression = f"{A}.n == 9223372036854775808"
    assert cel.compile_selector(expression).fast is None
    assert answer(expression) is not True


@pytest.mark.parametrize(("expression", "reads"), [
    (f'{A}.name == "a1"', (Read("attr", domain=D, name="name"),)),
    (f'{A}["name"] == "a1"', (Read("attr", domain=D, name="name"),)),
    (f"device.attributes['{D}']['name'] == 'a1'", (Read("attr", domain=D, name="name"),)),
    (f'device.capacity["{D}"]["memory"].isGreaterThan(quantity("1"))',
     (Read("cap", domain=D, name="memory"),)),
    (f'"name" in {A}', (Read("domain", "attr", D),)),
    # a domain indexed by a computed key reads the whole domain
    (f"{A}[{A}.name] == 1", (Read("attr", domain=D, name="name"), Read("domain", "attr", D))),
    ('device.driver == "x" && device.allowMultipleAllocations', (Read("driver"), Read("multi"))),
    (f'{A}.name == "a1" || {A}.name == "b"', (Read("attr", domain=D, name="name"),)),
])
def test_each_spelling_of_a_device_read_is_recognised(expression, reads):
    assert cel.compile_selector(expression).reads == reads


@pytest.mark.parametrize("expression", [
    'device["driver"] == "x"',
    'device.attributes[device.driver].name == "a1"',
    'device.other == 1',
    "device == device",
    f'device.attributes["{D}"].name.size() > 0 && device.foo',
])
def test_any_other_use_of_device_reads_the_whole_device(expression):
    assert cel.compile_selector(expression).reads is None
