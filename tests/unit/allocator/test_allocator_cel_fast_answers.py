"""The selector fast path (cel_fast) answers the shapes it covers itself, with cel-python's answer, and
leaves to cel-python exactly what it must: errors, mixed types, quantities ordered with `<`, non-boolean
operands. Answering is the point (the throughput benchmark's figures come from it); a fast path that
deferred everything would still be right, so each case says which of the two answers."""

from __future__ import annotations

import pytest
from support.decoded import read_slice

from driver.allocator import cel
from driver.allocator.cel_cache import decide

D = "gpu.carve.dev"
A = f'device.attributes["{D}"]'
C = f'device.capacity["{D}"]'


def _devices():
    raws = [
        {"name": "big", "allowMultipleAllocations": True,
         "attributes": {"name": {"string": "a100"}, "n": {"int": 7}, "flag": {"bool": True},
                        "v": {"version": "1.4.0"}},
         "capacity": {"memory": {"value": "40Gi"}}},
        {"name": "small",
         "attributes": {"name": {"string": "t4"}, "n": {"int": 2}, "flag": {"bool": False},
                        "v": {"version": "1.0.0-rc.1"}},
         "capacity": {"memory": {"value": "1Gi"}}},
    ]
    return read_slice({"metadata": {"name": "s"}, "spec": {
        "driver": D, "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": raws}}).devices


DEVICES = _devices()


def _slow(expression, dev):
    try:
        return cel.compile_selector(expression).evaluate(dev.cel_value())
    except cel.CelError as e:
        return e.message


def _decided(expression, dev):
    program = cel.compile_selector(expression)
    try:
        return decide(program, dev)
    except cel.CelError as e:
        return e.message, False


FAST = [
    (f'device.driver == "{D}"', (True, True)),
    ('device.driver != "x"', (True, True)),
    ("device.allowMultipleAllocations", (True, False)),
    ("!device.allowMultipleAllocations", (False, True)),
    (f'{A}.name == "a100"', (True, False)),
    (f'{A}.name != "a100"', (False, True)),
    (f'{A}.name < "b"', (True, False)),
    (f'{A}.name >= "b"', (False, True)),
    (f"{A}.n > 5", (True, False)),
    (f"{A}.n >= 7", (True, False)),
    (f"{A}.n < 7", (False, True)),
    (f"{A}.n <= 2", (False, True)),
    (f"{A}.flag", (True, False)),
    (f"{A}.flag == true", (True, False)),
    (f"has({A}.name)", (True, True)),
    (f"has({A}.missing)", (False, False)),
    (f"has({C}.memory)", (True, True)),
    (f'"name" in {A}', (True, True)),
    (f'"memory" in {C}', (True, True)),
    (f'"other" in {A}', (False, False)),
    (f'{A}.name in ["t4", "a100"]', (True, True)),
    (f'{A}.name in ["t4"]', (False, True)),
    (f"{A}.n in [7, 8]", (True, False)),
    (f'{C}.memory.isGreaterThan(quantity("2Gi"))', (True, False)),
    (f'{C}.memory.isLessThan(quantity("2Gi"))', (False, True)),
    (f'{C}.memory.compareTo(quantity("1Gi")) == 0', (False, True)),
    (f'{C}.memory.compareTo(quantity("1Gi")) > 0', (True, False)),
    (f'{C}.memory == quantity("40Gi")', (True, False)),
    (f'{A}.v.isGreaterThan(semver("1.0.0"))', (True, False)),
    (f'{A}.v.isLessThan(semver("v1.1", true))', (False, True)),
    (f'{A}.v.compareTo(semver("1.4.0")) == 0', (True, False)),
    (f'{A}.v == semver("1.4.0")', (True, False)),
    # a missing attribute is an error value that && and || absorb, on either side
    (f"false && {A}.missing == 1", (False, False)),
    (f"{A}.missing == 1 && false", (False, False)),
    (f"{A}.missing == 1 || true", (True, True)),
    (f"true || {A}.missing == 1", (True, True)),
    (f"({A}.n > 5 && {A}.flag) || {A}.name == \"t4\"", (True, True)),
    (f"!({A}.n > 5) && !{A}.flag", (False, True)),
]


@pytest.mark.parametrize(("expression", "answers"), FAST)
def test_a_covered_shape_is_answered_by_the_fast_path_as_cel_python_answers(expression, answers):
    assert cel.compile_selector(expression).fast is not None
    for dev, answer in zip(DEVICES, answers, strict=True):
        assert _slow(expression, dev) is answer
        assert _decided(expression, dev) == (answer, True), dev.name


DEFERRED = [
    f"{A}.missing == 1",  # an error: cel-python words it
    f"!({A}.missing == 1)",
    f"{A}.missing == 1 && true",
    f"false || {A}.missing == 1",
    f"{A}.n == {A}.missing",
    f"{C}.missing.isGreaterThan(quantity(\"1\"))",
    f"{A}.v.isGreaterThan({A}.missing)",
    f'{A}.name == 1',  # mixed types
    f'{C}.memory < quantity("2Gi")',  # a quantity ordered with <
    f'{A}.name.compareTo(quantity("1")) == 0',  # not a quantity or semver
    f"{A}.n && true",  # a non-boolean operand
    f'{A}.n in ["7"]',
    f'{A}.n in {A}',
]


@pytest.mark.parametrize("expression", DEFERRED)
def test_what_the_fast_path_cannot_answer_is_left_to_cel_python(expression):
    assert cel.compile_selector(expression).fast is not None
    for dev in DEVICES:
        answer, fast = _decided(expression, dev)
        assert not fast
        assert answer == _slow(expression, dev)


@pytest.mark.parametrize("expression", [
    f"{A}.flag in [true]",  # bool lists are cel-python's
    f'{A}.name in ["a", 1]',  # mixed literal lists
    f"{A}.name in []",
    f'{A}.name in [{A}.name]',  # not all literals
    f'{A}.name in ["x", "a" + "100"]',
    f'{A}.n in [1, device.allowMultipleAllocations ? 7 : 2]',
    f'{A}.flag in [!{A}.flag, {A}.flag || false]',
    f'{A}.name.startsWith("a")',  # other methods
    f'{C}.memory.isGreaterThan(quantity("1Gi"), 1)',
    f'{C}.memory == quantity("1x")',  # a bad literal: a runtime error cel-python words
    f'{C}.memory == quantity({A}.name)',
    'semver("1.0.0", 1) == semver("1.0.0")',
    "size(device.attributes) > 0",
    f"{A}.n + 1 == 8",
    "1.5 > 1.0",
])
def test_other_shapes_are_not_compiled_to_the_fast_path(expression):
    assert cel.compile_selector(expression).fast is None
    for dev in DEVICES:
        assert _decided(expression, dev) == (_slow(expression, dev), False)


def test_the_fast_path_can_be_switched_off_per_call():
    program = cel.compile_selector(f'{A}.name == "a100"')
    assert decide(program, DEVICES[0], fast=False) == (True, False)
