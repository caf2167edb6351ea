"""The fast path gives cel-python's answer, form by form, on random devices (cel_fast)."""

import pytest
from cel_strategies import device_lists, expressions, reference
from hypothesis import given, settings

from driver.allocator import cel
from driver.allocator.cel_cache import DeviceInputs
from driver.allocator.cel_fast import Defer
from driver.allocator.model import read_slice

A = 'device.attributes["gpu.carve.dev"]'
CAP = 'device.capacity["gpu.carve.dev"]'
FORMS = [
    'device.driver == "gpu.carve.dev"',
    'device.driver != "gpu.carve.dev"',
    f'{A}.type == "mig"',
    f'{A}["type"] != "mig"',
    f'"mig" == {A}.type',
    f'{A}.index == 3',
    f'{A}.index < 3', f'{A}.index <= 3', f'{A}.index > 0', f'{A}.index >= 7',
    f'{A}.type < "b"',
    f'{A}.ok', f'{A}.ok == true', f'!{A}.ok',
    'device.allowMultipleAllocations',
    f'{CAP}.memory.compareTo(quantity("1Gi")) >= 0',
    f'{CAP}.memory.compareTo(quantity("40Gi")) == 0',
    f'{CAP}.memory.isGreaterThan(quantity("512Mi"))',
    f'{CAP}.cores.isLessThan(quantity("100"))',
    f'{CAP}.memory == quantity("1Gi")',
    f'{A}.v.isGreaterThan(semver("1.2.3"))',
    f'{A}.v.compareTo(semver("1.2.3-rc.1")) < 0',
    f'{A}.v == semver("1.2.3")',
    f'{A}.type in ["mig", "gpu"]',
    f'{A}.index in [0, 3]',
    f'"profile" in {A}',
    f'{A}.type == "mig" && {A}.profile == "1g.10gb"',
    f'{A}.profile == "1g.10gb" || {A}.type == "gpu"',
    f'!({A}.profile == "1g.10gb") && device.driver == "gpu.carve.dev"',
    f'{A}.index > 2 && ({A}.index < 10 || {A}.profile == "a")',
    f'has({A}.type)', f'!has({A}.profile)', f'has({A}.type) && !has({CAP}.cores)',
]


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=30, deadline=None)
@given(devices=device_lists())
def test_each_fast_form_agrees_with_cel_python(form, devices):
    program = cel.compile_selector(form)
    assert program.fast is not None, form
    for d in devices:
        try:
            got = ("ok", program.fast(DeviceInputs(d)))
        except Defer:
            continue  # cel-python answers this one
        assert got == reference(form, d), (form, d.attributes, d.raw_capacity)


@settings(max_examples=200, deadline=None)
@given(expressions, device_lists())
def test_fast_path_agrees_with_cel_python_on_random_expressions(expression, devices):
    program = cel.compile_selector(expression)
    if program.fast is None:
        return
    for d in devices:
        try:
            got = ("ok", program.fast(DeviceInputs(d)))
        except Defer:
            continue
        assert got == reference(expression, d), (expression, d.attributes, d.raw_capacity)


TYPED = read_slice({"metadata": {"name": "s"}, "spec": {
    "driver": "gpu.carve.dev", "nodeName": "n",
    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
    "devices": [{"name": "d", "allowMultipleAllocations": True,
                 "attributes": {"type": {"string": "mig"}, "index": {"int": 3}, "ok": {"bool": True},
                                "v": {"version": "1.2.3"}},
                 "capacity": {"memory": {"value": "40Gi"}, "cores": {"value": "50"}}}]}}).devices[0]


@pytest.mark.parametrize("form", [f for f in FORMS if "profile ==" not in f])
def test_fast_path_answers_well_typed_devices_itself(form):
    # Not deferring is the point of the fast path: on a device with the expected kinds it decides.
    expected = reference(form, TYPED)
    assert expected[0] == "ok"
    assert ("ok", cel.compile_selector(form).fast(DeviceInputs(TYPED))) == expected


@pytest.mark.parametrize(("form", "expected"), [
    (f'false && {A}.profile == "x"', False),
    (f'{A}.profile == "x" && false', False),
    (f'true || {A}.profile == "x"', True),
    (f'{A}.profile == "x" || true', True),
    (f'{A}.profile == "x" || {A}.type == "mig"', True),
])
def test_and_or_absorb_errors_commutatively(form, expected):
    assert cel.compile_selector(form).fast(DeviceInputs(TYPED)) is expected
    assert reference(form, TYPED) == ("ok", expected)


@pytest.mark.parametrize("form", [
    f'{A}.profile == "x"', f'{A}.profile == "x" && true', f'!({A}.profile == "x")',
    f'{A}.index == "3"', f'{CAP}.memory > quantity("1Gi")', f'{A}.index && true',
])
def test_errors_and_mixed_kinds_are_left_to_cel_python(form):
    with pytest.raises(Defer):
        cel.compile_selector(form).fast(DeviceInputs(TYPED))


def test_library_errors_are_absorbed_like_other_errors():
    # Kubernetes: `false && x.isGreaterThan(bad)` is false; cel-python used to raise here.
    assert cel.evaluate(f'false && {A}.type.isGreaterThan(quantity("1"))', TYPED.cel_value()) is False
    with pytest.raises(cel.CelError, match="isGreaterThan: expected a quantity or a semver, got StringType"):
        cel.evaluate(f'{A}.type.isGreaterThan(quantity("1"))', TYPED.cel_value())


@pytest.mark.parametrize("form", [
    f'size({A}) > 1', f'{A}.type.startsWith("m")', f'{A}.index + 1 == 4',
    f'{A}.type == "a\\\\b"', f'{A}.index == 3u', 'quantity("12GB") == quantity("1")',
    f'{A}.index > 2 ? true : false',
])
def test_other_shapes_run_on_cel_python(form):
    assert cel.compile_selector(form).fast is None


@pytest.mark.parametrize(("form", "expected"), [
    (f'!has({A}.profile)', True), (f'!has({A}.type)', False), (f'has({A}.type) && !has({A}.zz)', True),
])
def test_negated_has_works_on_cel_python_too(form, expected):
    # cel-python's compiled runner fails `!has(...)` with "no such overload"; such expressions run
    # on its interpreted runner, which answers as Kubernetes does.
    assert cel.evaluate(form, TYPED.cel_value()) is expected
    assert cel.compile_selector(form).fast(DeviceInputs(TYPED)) is expected


def test_a_version_ordered_against_a_string_is_an_error_that_and_absorbs():
    # Found by the random test above: cel-python crashed (AttributeError) on `version < "mig"` instead of
    # giving CEL's "no such overload" error, so `false && ...` was an error rather than false.
    device = read_slice({"metadata": {"name": "s"}, "spec": {
        "driver": "gpu.carve.dev", "nodeName": "n",
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "d", "attributes": {"example.com/type": {"version": "1.2.3"}}}]}}).devices[0]
    absorbed = f'has({A}.type) && device.attributes["example.com"].type < "mig"'
    assert reference(absorbed, device) == ("ok", False)
    assert cel.compile_selector(absorbed).fast(DeviceInputs(device)) is False
    assert reference('device.attributes["example.com"].type < "mig"', device)[0] == "error"
