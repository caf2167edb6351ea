"""Selector results cached per distinct input equal evaluating every device (cel_ast.reads, cel_cache)."""

import contextlib

import pytest
from cel_strategies import device_lists, expressions, reference
from hypothesis import given, settings

from driver.allocator import cel
from driver.allocator.cel_ast import Read
from driver.allocator.cel_cache import SelectorCache, input_key


def reads_of(expression):
    return cel.compile_selector(expression).reads


@settings(max_examples=200, deadline=None)
@given(expressions, device_lists())
def test_cached_results_equal_evaluating_every_device(expression, devices):
    cache = SelectorCache()
    for d in devices:
        try:
            got = ("ok", cache.matches(expression, d))
        except cel.CelError as e:
            got = ("error", e.message)
        assert got == reference(expression, d), (expression, d.attributes, d.raw_capacity)


@settings(max_examples=100, deadline=None)
@given(expressions, device_lists(min_size=4))
def test_devices_that_agree_on_what_is_read_share_one_evaluation(expression, devices):
    cache = SelectorCache()
    for d in devices:
        with contextlib.suppress(cel.CelError):
            cache.matches(expression, d)
    program = cel.compile_selector(expression)
    if program.reads is not None:
        assert cache.evaluations == len({input_key(program.reads, d) for d in devices})
    else:
        assert cache.evaluations == len(devices)


@pytest.mark.parametrize(("expression", "expected"), [
    ('device.driver == "x" && device.attributes["gpu.carve.dev"].type == "mig"',
     (Read("attr", domain="gpu.carve.dev", name="type"), Read("driver"))),
    ('device.attributes["a.b"]["x"] > 1 || !device.allowMultipleAllocations',
     (Read("attr", domain="a.b", name="x"), Read("multi"))),
    ('device.capacity["gpu.carve.dev"].memory.compareTo(quantity("1Gi")) >= 0',
     (Read("cap", domain="gpu.carve.dev", name="memory"),)),
    ('"x" in device.attributes["a.b"]', (Read("domain", "attr", "a.b"),)),
    ('has(device.attributes["a.b"].x)', (Read("attr", domain="a.b", name="x"),)),
    ('size(device.capacity["a.b"]) > 0', (Read("domain", "cap", "a.b"),)),
    ("1 < 2", ()),
    # a macro variable's .attributes is its own map, not the device's (whatever the variable's name)
    ('[{"attributes": {"d": {"t": 1}}}].exists(x, x.attributes["d"].t == 1)', ()),
    ('[{"attributes": {"d": {"t": 1}}}].exists(a, a.attributes["d"].t == 1)', ()),
])
def test_reads_are_derived_from_the_expression(expression, expected):
    assert reads_of(expression) == expected


@pytest.mark.parametrize("expression", [
    'size(device.attributes) > 0',
    'device.attributes[device.driver].x == 1',
    '.device.driver == "x"',
    'device.attributes.exists(d, d == "a.b")',
    '[device][0].driver == "x"',
])
def test_anything_else_reads_the_whole_device(expression):
    assert reads_of(expression) is None
