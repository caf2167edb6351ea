"""The device-selector CEL environment: Kubernetes semantics on cel-python."""

import threading

import pytest

from driver.allocator import cel
from driver.allocator.cel_cache import SelectorCache
from driver.allocator.model import read_slice

DEVICE = cel.device_value(
    "gpu.carve.dev",
    {"type": {"string": "mig"}, "index": {"int": 3}, "migCapable": {"bool": True},
     "cudaComputeCapability": {"version": "8.0.0"}, "example.com/rack": {"string": "r7"}},
    {"memory": {"value": "40Gi"}, "example.com/bandwidth": {"value": "100G"}},
    True,
)


def ev(expression: str) -> bool:
    return cel.evaluate(expression, DEVICE)


@pytest.mark.parametrize("expression", [
    'device.driver == "gpu.carve.dev"',
    'device.attributes["gpu.carve.dev"].type == "mig"',
    'device.attributes["gpu.carve.dev"].index == 3',
    'device.attributes["gpu.carve.dev"].migCapable',
    'device.attributes["example.com"].rack == "r7"',
    'device.capacity["example.com"].bandwidth.isGreaterThan(quantity("10G"))',
    'device.allowMultipleAllocations',
])
def test_device_variable_has_driver_attributes_capacity_by_domain(expression):
    assert ev(expression) is True


def test_unqualified_names_belong_to_the_driver_domain():
    assert ev('"type" in device.attributes["gpu.carve.dev"]')
    assert not ev('"rack" in device.attributes["gpu.carve.dev"]')


def test_unknown_domain_is_an_empty_map():
    assert ev('size(device.attributes["nvidia.com"]) == 0')
    assert not ev('"x" in device.capacity["nvidia.com"]')


def test_unknown_attribute_is_an_error_naming_the_expression():
    with pytest.raises(cel.CelError, match="no such key") as e:
        ev('device.attributes["gpu.carve.dev"].profile == "1g.10gb"')
    assert 'profile == "1g.10gb"' in str(e.value)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(("expression", "why"), [
    # the runner's word for it and Python's cause, which says which operation
    ('device.attributes["gpu.carve.dev"].index / 0 == 1', "by zero: integer division or modulo by zero"),
    ('device.attributes["gpu.carve.dev"].index % 0 == 1', "divide by zero: integer modulo by zero"),
    ('int(device.attributes["gpu.carve.dev"].type) == 1', "invalid literal for int"),
    ('[1][device.attributes["gpu.carve.dev"].index] == 1', "list index out of range"),
    ('timestamp(device.attributes["gpu.carve.dev"].type) == timestamp("2026-01-01T00:00:00Z")',
     "runtime error"),
])
def test_a_runtime_error_is_a_cel_error_that_says_what_went_wrong(compiled, expression, why):
    # each runner wraps the error its own way; the sentence names it (and a tenant's bad timestamp is a
    # CelError for its claim, never an exception out of the allocator)
    with pytest.raises(cel.CelError, match=why) as e:
        cel.compile_selector(expression, compiled).evaluate(DEVICE)
    assert expression in str(e.value)


@pytest.mark.parametrize("length", [200, 201])
def test_an_errors_expression_is_shown_whole_up_to_200_characters_then_cut(length):
    head = 'device.attributes["gpu.carve.dev"].profile == "'
    expression = head + "a" * (length - len(head) - 1) + '"'
    assert len(expression) == length
    with pytest.raises(cel.CelError) as e:
        ev(expression)
    shown = expression if length <= 200 else expression[:197] + "..."
    assert str(e.value).endswith(f"(expression: {shown})")


def test_non_boolean_result_is_an_error():
    with pytest.raises(cel.CelError, match="must be a boolean"):
        ev('device.attributes["gpu.carve.dev"].index')


def test_expression_over_10_kib_is_refused_with_the_limit():
    long = "true && " * 1300 + "true"
    with pytest.raises(cel.CelError, match="10240"):
        ev(long)


def test_syntax_error_is_a_compile_error():
    with pytest.raises(cel.CelError, match="compile error"):
        ev('device.driver == ')


@pytest.mark.parametrize(("expression", "expected"), [
    ('device.capacity["gpu.carve.dev"].memory.compareTo(quantity("40Gi")) == 0', True),
    ('device.capacity["gpu.carve.dev"].memory.isLessThan(quantity("40G"))', False),
    ('quantity("1Gi").add(quantity("512Mi")) == quantity("1.5Gi")', True),
    ('quantity("1Gi").sub(1073741823) == quantity("1")', True),
    ('quantity("1500m").isInteger()', False),
    ('quantity("2k").asInteger() == 2000', True),
    ('quantity("-5").sign() == -1', True),
    ('quantity("1.5").asApproximateFloat() == 1.5', True),
    ('isQuantity("1Gi") && !isQuantity("1GB")', True),
])
def test_quantity_library(expression, expected):
    assert ev(expression) is expected


@pytest.mark.parametrize(("expression", "expected"), [
    ('device.attributes["gpu.carve.dev"].cudaComputeCapability.isGreaterThan(semver("7.5.0"))', True),
    ('device.attributes["gpu.carve.dev"].cudaComputeCapability.compareTo(semver("8.0.0")) == 0', True),
    ('device.attributes["gpu.carve.dev"].cudaComputeCapability.isLessThan(semver("8.0.0-rc.1"))', False),
    ('semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3', True),
    ('isSemver("1.2.3") && !isSemver("1.2") && isSemver("v1.2", true)', True),
    ('semver("v1.2", true) == semver("1.2.0")', True),  # normalized only when asked
    ('semver("1.2.4") == semver("1.2.3") || semver("1.2.2") == semver("1.2.3")', False),
    ('semver("1.2.3") == semver("1.2.3") && semver("1.2.4") != semver("1.2.3")', True),
])
def test_semver_library(expression, expected):
    assert ev(expression) is expected


@pytest.mark.parametrize("expression", [
    'device.attributes["gpu.carve.dev"].type.upperAscii() == "MIG"',
    '"A-b".lowerAscii() == "a-b"',
    '"1g.10gb".split(".")[1] == "10gb"',
    '["a", "b"].join("-") == "a-b"',
    '"  x ".trim() == "x"',
    '"1g.10gb".indexOf("g") == 1 && "1g.10gb".lastIndexOf("g") == 5',
    '"mig-1g".replace("-", "_") == "mig_1g"',
    '"abc".substring(1) == "bc" && "abc".charAt(2) == "c"',
    '"1g.10gb".startsWith("1g") && "1g.10gb".endsWith("gb") && "1g.10gb".matches("^[0-9]g")',
    '"gpu-12".find("[0-9]+") == "12"',
    '[1, 2, 3].isSorted() && [3, 1].max() == 3 && [1, 2, 3].sum() == 6',
    '"1g.10gb".indexOf("10") == 3 && "gbgb".indexOf("gb", 1) == 2 && "gb".indexOf("bg") == -1',
    '[1, 2, 3, 2].indexOf(2) == 1 && [1, 2].indexOf(5) == -1',
    # split(sep, n): at most n parts, the last holding the rest; n < 0 all of them, 0 none
    '"a,b,c".split(",", 2) == ["a", "b,c"] && "a,b,c".split(",", -1) == ["a", "b", "c"]',
    '"abc".split("", 2) == ["a", "bc"] && "abc".split("") == ["a", "b", "c"] && "a,b".split(",", 0) == []',
])
def test_string_and_list_extensions(expression):
    assert ev(expression) is True


def test_a_semver_that_needs_normalizing_is_a_runtime_error_unless_asked_to():
    with pytest.raises(cel.CelError, match=r"v1\.2"):
        ev('semver("v1.2") == semver("1.2.0")')


def test_bad_quantity_literal_is_a_runtime_error():
    with pytest.raises(cel.CelError, match="not a quantity"):
        ev('quantity("12GB").isGreaterThan(quantity("1"))')


def _devices(*attrs_list, generation=1):
    devices = [{"name": f"d{i}", "attributes": attrs} for i, attrs in enumerate(attrs_list)]
    s = read_slice({"metadata": {"name": "s"}, "spec": {
        "driver": "gpu.carve.dev", "nodeName": "n", "devices": devices,
        "pool": {"name": "p", "generation": generation, "resourceSliceCount": 1}}})
    return s.devices


def test_a_device_remembers_its_input_key_once_per_read_set_of_the_selectors():
    # two selectors reading the same attribute share one read set: the device computes what they read
    # once (cel_cache.input_key, remembered per interned read set), a selector reading another one adds one
    (dev,) = _devices({"type": {"string": "mig"}, "index": {"int": 2}})
    cache = SelectorCache()
    first = 'device.attributes["gpu.carve.dev"].type == "mig"'
    assert cache.matches(first, dev)
    assert not cache.matches('device.attributes["gpu.carve.dev"].type == "x"', dev)
    program = cel.compile_selector(first)
    assert program.reads_id >= 0 and list(dev.input_keys) == [program.reads_id]
    assert cache.matches('device.attributes["gpu.carve.dev"].index == 2', dev)
    assert len(dev.input_keys) == 2


@pytest.mark.parametrize("literal", ["-1", "-9223372036854775808"])
def test_a_negative_int_literal_takes_the_fast_path_down_to_int64_min(literal):
    (dev,) = _devices({"index": {"int": 2}})
    cache = SelectorCache()
    assert cache.matches(f'device.attributes["gpu.carve.dev"].index > {literal}', dev)
    assert not cache.matches(f'device.attributes["gpu.carve.dev"].index < {literal}', dev)
    assert cache.fast_answers == 2  # answered without cel-python, which agrees (test_allocator_cel_fast)


def test_a_selector_reading_a_whole_domain_is_not_shared_between_devices_whose_domains_differ():
    # both devices allow the same (no) multiple allocations; only their domain maps differ
    with_x, without = _devices({"x": {"string": "1"}}, {"y": {"string": "1"}})
    cache = SelectorCache()
    expr = '"x" in device.attributes["gpu.carve.dev"]'
    assert cache.matches(expr, with_x) and not cache.matches(expr, without)
    assert cache.matches("!device.allowMultipleAllocations", with_x)
    assert cache.matches("!device.allowMultipleAllocations", without) and cache.hits == 1


@pytest.mark.parametrize("call", ['quantity("1Gi", "x")', 'quantity("1Gi", 1)', 'semver("1.2.3", true, 1)'])
def test_a_constant_call_with_arguments_cel_has_no_overload_for_is_an_error_on_the_fast_path_too(call):
    # the fast path folds quantity("1Gi") and semver("1.2.3"[, bool]) once; any other arguments are CEL's
    # "no such overload", as cel-python says, not a folded value
    (dev,) = _devices({"type": {"string": "mig"}})
    with pytest.raises(cel.CelError, match="overload"):
        SelectorCache().matches(f'{call} == {call}', dev)


def test_result_cache_shares_results_between_devices_that_agree_on_what_is_read():
    mig, mig2, gpu = _devices({"type": {"string": "mig"}, "uuid": {"string": "a"}},
                              {"type": {"string": "mig"}, "uuid": {"string": "b"}},
                              {"type": {"string": "gpu"}, "uuid": {"string": "c"}})
    cache = SelectorCache()
    expr = 'device.attributes["gpu.carve.dev"].type == "mig"'
    assert [cache.matches(expr, d) for d in (mig, mig2, gpu, mig)] == [True, True, False, True]
    assert (cache.hits, cache.misses, cache.evaluations) == (2, 2, 2)


def test_result_cache_keys_an_expression_that_reads_anything_by_device_and_generation():
    expr = 'size(device.attributes["gpu.carve.dev"]) > 0 || device.attributes.size() == 0'
    mig = {"type": {"string": "mig"}}
    (old,), (new,) = _devices(mig), _devices(mig, generation=2)
    cache = SelectorCache()
    assert cache.matches(expr, old) and cache.matches(expr, old) and cache.matches(expr, new)
    assert (cache.hits, cache.misses) == (1, 2)
    cache.forget(lambda key: key[2] == 2)
    assert len(cache) == 1


def test_result_cache_keeps_errors_as_results():
    a, b = _devices({"type": {"string": "gpu"}}, {"type": {"string": "gpu"}})
    cache = SelectorCache()
    expr = 'device.attributes["gpu.carve.dev"].profile == "1g.10gb"'
    for d in (a, b):
        with pytest.raises(cel.CelError, match="no such key"):
            cache.matches(expr, d)
    assert (cache.hits, cache.evaluations) == (1, 1)


def test_evaluation_is_thread_safe():
    expr = 'device.capacity["gpu.carve.dev"].memory.isGreaterThan(quantity("1Gi"))'
    errors = []

    def work():
        try:
            for _ in range(200):
                assert ev(expr)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_interpreted_and_compiled_runners_agree():
    # DEVICE has index 3 and driver gpu.carve.dev: one true and one false answer, from both runners
    for expr, expected in [('device.attributes["gpu.carve.dev"].index > 2', True),
                           ('device.driver.startsWith("x")', False)]:
        for compiled in (False, True):
            got = cel.compile_selector(expr, compiled=compiled).evaluate(DEVICE)
            assert got is expected, (expr, compiled, got)
