"""Each Kubernetes CEL library function a selector may call, as a tenant sees it: its answer at the
bounds Kubernetes' libraries state (cel-go's ext strings, regex, lists; k8s' quantity and semver), the
error it gives out of them (naming the function and what was wrong), and what it costs the meter."""

from __future__ import annotations

import pytest

from driver.allocator import cel, cel_cost, cel_library

DRIVER = "gpu.carve.dev"
DEVICE = cel.device_value(
    DRIVER,
    {"name": {"string": "hello"}, "n": {"int": 3}, "v": {"version": "1.2.3"}},
    {"memory": {"value": "40Gi"}},
    False,
)


def _run(expression: str, compiled: bool) -> bool:
    return cel.compile_selector(expression, compiled).evaluate(DEVICE)


TRUE = [
    # extended strings: charAt's index may be the length (an empty string), not past it
    '"hello".charAt(0) == "h"',
    '"hello".charAt(4) == "o"',
    '"hello".charAt(5) == ""',
    # indexOf: from an offset, an offset equal to the length, a miss
    '"hello".indexOf("l") == 2',
    '"hello".indexOf("l", 3) == 3',
    '"hello".indexOf("l", 4) == -1',
    '"hello".indexOf("", 5) == 5',
    '"hello".indexOf("z") == -1',
    '"hello".indexOf("hello", 0) == 0',
    # lastIndexOf: the last hit, a hit may start at the offset and run past it
    '"hello".lastIndexOf("l") == 3',
    '"hello".lastIndexOf("l", 2) == 2',
    '"hello".lastIndexOf("l", 1) == -1',
    '"hello".lastIndexOf("ll", 2) == 2',
    '"hello".lastIndexOf("h", 0) == 0',
    '"hello".lastIndexOf("", 5) == 5',
    '"hello".lastIndexOf("z") == -1',
    # only ASCII letters change case, and only those (the neighbours of A-Z and a-z stay)
    '"AZaz@[`{É".lowerAscii() == "azaz@[`{É"',
    '"AZaz@[`{é".upperAscii() == "AZAZ@[`{é"',
    '"".lowerAscii() == ""',
    # replace: every hit, the first n, none
    '"aaa".replace("a", "b") == "bbb"',
    '"aaa".replace("a", "b", 2) == "bba"',
    '"aaa".replace("a", "b", 1) == "baa"',
    '"aaa".replace("a", "b", 0) == "aaa"',
    '"aaa".replace("a", "b", -1) == "bbb"',
    '"aaa".replace("a", "b", -7) == "bbb"',
    '"abc".replace("", "-") == "-a-b-c-"',
    '"abab".replace("ab", "x") == "xx"',
    # split: a limit of n gives at most n parts, the last holding the rest
    '"a,b,c".split(",") == ["a", "b", "c"]',
    '"a,b,c".split(",", -1) == ["a", "b", "c"]',
    '"a,b,c".split(",", 3) == ["a", "b", "c"]',
    '"a,b,c".split(",", 4) == ["a", "b", "c"]',
    '"a,b,c".split(",", 2) == ["a", "b,c"]',
    '"a,b,c".split(",", 1) == ["a,b,c"]',
    '"a,b,c".split(",", 0) == []',
    '"abc".split("") == ["a", "b", "c"]',
    '"abc".split("", 2) == ["a", "bc"]',
    '"abc".split("", 1) == ["abc"]',
    '"abc".split("", 3) == ["a", "b", "c"]',
    '"abcde".split("", 3) == ["a", "b", "cde"]',
    '"abcdef".split("", 5) == ["a", "b", "c", "d", "ef"]',
    '"abc".split("", 4) == ["a", "b", "c"]',
    '"abc".split("", -1) == ["a", "b", "c"]',
    '"abc".split("", 0) == []',
    # substring: [begin, end), end defaulting to the length; begin may equal end
    '"hello".substring(1) == "ello"',
    '"hello".substring(0) == "hello"',
    '"hello".substring(5) == ""',
    '"hello".substring(1, 3) == "el"',
    '"hello".substring(2, 2) == ""',
    '"hello".substring(0, 5) == "hello"',
    '" \\t a b \\n".trim() == "a b"',
    '["a", "b"].join() == "ab"',
    '["a", "b", "c"].join("-") == "a-b-c"',
    '[].join("-") == ""',
    '"abc".reverse() == "cba"',
    '"".reverse() == ""',
    '"ab".reverse() == "ba"',
    # regex: matches searches (RE2, unanchored), find the first match, findAll up to n
    '"abc".matches("b")',
    '!"abc".matches("^b")',
    '"abc".matches("^abc$")',
    '"abc123d45".find("[0-9]+") == "123"',
    '"abc".find("[0-9]+") == ""',
    '"a1b22c333".findAll("[0-9]+") == ["1", "22", "333"]',
    '"a1b22c333".findAll("[0-9]+", -1) == ["1", "22", "333"]',
    '"a1b22c333".findAll("[0-9]+", 2) == ["1", "22"]',
    '"a1b22c333".findAll("[0-9]+", 1) == ["1"]',
    '"a1b22c333".findAll("[0-9]+", 3) == ["1", "22", "333"]',
    '"a1b22c333".findAll("[0-9]+", 9) == ["1", "22", "333"]',
    '"a1b22c333".findAll("[0-9]+", 0) == []',
    '"abc".findAll("[0-9]") == []',
    # lists
    '[1, 2, 2, 3].isSorted()',
    '!([2, 1].isSorted())',
    '!([1, 3, 2].isSorted())',
    '[].isSorted()',
    '[7].isSorted()',
    '["a", "b", "b"].isSorted()',
    '[1, 2, 3].sum() == 6',
    '[5].sum() == 5',
    '[].sum() == 0',
    '[1.5, 2.25].sum() == 3.75',
    '[3, 1, 2].min() == 1',
    '[1, 3, 2].min() == 1',
    '[2, 3, 1].min() == 1',
    '[3, 1, 2].max() == 3',
    '[1, 2, 3].max() == 3',
    '[2, 3, 1].max() == 3',
    '[4].min() == 4 && [4].max() == 4',
    '["b", "a", "c"].min() == "a" && ["b", "c", "a"].max() == "c"',
    '[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2',
    '[1, 2].indexOf(3) == -1 && [1, 2].lastIndexOf(3) == -1',
    '[].indexOf(1) == -1 && [].lastIndexOf(1) == -1',
    '[5, 6].lastIndexOf(5) == 0 && [5, 6].indexOf(6) == 1',
    # quantities
    'quantity("1Gi").isGreaterThan(quantity("1G"))',
    '!quantity("1G").isGreaterThan(quantity("1G"))',
    'quantity("1G").isLessThan(quantity("1Gi"))',
    '!quantity("1G").isLessThan(quantity("1G"))',
    '!quantity("2G").isLessThan(quantity("1G"))',
    'quantity("1G").compareTo(quantity("1Gi")) == -1',
    'quantity("1000M").compareTo(quantity("1G")) == 0',
    'quantity("1Gi").compareTo(quantity("1G")) == 1',
    'quantity("1").add(1) == quantity("2")',
    'quantity("1").add(quantity("500m")) == quantity("1500m")',
    'quantity("1").sub(3) == quantity("-2")',
    'quantity("1").sub(quantity("250m")) == quantity("750m")',
    'quantity("2k").asInteger() == 2000',
    'quantity("-2k").asInteger() == -2000',
    'quantity("1500m").asApproximateFloat() == 1.5',
    'quantity("-250m").asApproximateFloat() == -0.25',
    'quantity("-1m").sign() == -1 && quantity("0").sign() == 0 && quantity("1m").sign() == 1',
    'quantity("2").isInteger()',
    '!quantity("1500m").isInteger()',
    '!quantity("10E").isInteger()',
    'quantity("-9E").isInteger()',
    'isQuantity("1Gi") && !isQuantity("1 Gi") && !isQuantity("x")',
    'device.capacity["gpu.carve.dev"].memory.isGreaterThan(quantity("39Gi"))',
    # semvers
    'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3',
    'semver("v1.2", true).major() == 1 && semver("v1.2", true).minor() == 2',
    'semver("v1.2", true).patch() == 0',
    'isSemver("1.2.3") && !isSemver("v1.2") && isSemver("v1.2", true) && !isSemver("x", true)',
    'semver("1.2.3").isLessThan(semver("1.10.0"))',
    'semver("1.10.0").isGreaterThan(semver("1.2.3"))',
    '!semver("1.2.3").isGreaterThan(semver("1.2.3"))',
    'semver("1.2.3").compareTo(semver("1.2.3")) == 0',
    'semver("1.2.3-rc.1").compareTo(semver("1.2.3")) == -1',
    'device.attributes["gpu.carve.dev"].v.isGreaterThan(semver("1.2.2"))',
    # an error value of a called function is absorbed by && and || as in Kubernetes
    '!(false && quantity("x").isInteger())',
    'true || "a".charAt(9) == ""',
]


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("expression", TRUE)
def test_library_function_answers_as_kubernetes(expression, compiled):
    assert _run(expression, compiled) is True


ERRORS = [
    ('"hello".charAt(6) == ""', "charAt: index out of range: 6"),
    ('"hello".charAt(-1) == ""', "charAt: index out of range: -1"),
    ('"hello".indexOf("l", 6) == 0', "indexOf: index out of range: 6"),
    ('"hello".indexOf("l", -1) == 0', "indexOf: index out of range: -1"),
    ('"hello".lastIndexOf("l", 6) == 0', "lastIndexOf: index out of range: 6"),
    ('"hello".lastIndexOf("l", -1) == 0', "lastIndexOf: index out of range: -1"),
    ('"hello".substring(3, 2) == ""', "substring: index out of range: 3..2 of 5"),
    ('"hello".substring(0, 6) == ""', "substring: index out of range: 0..6 of 5"),
    ('"hello".substring(-1) == ""', "substring: index out of range: -1..5 of 5"),
    ('"hello".substring(6) == ""', "substring: index out of range: 6..5 of 5"),
    ('["a", 1].join() == ""', "join: expected a string, got IntType"),
    ('["a"].join(1) == ""', "join: expected a string, got IntType"),
    ('"a".join() == ""', "join: expected a list of strings, got StringType"),
    ('"a".isSorted()', "isSorted: expected a list, got StringType"),
    ('"a".sum() == 0', "sum: expected a list, got StringType"),
    ('[].min() == 0', "empty sequence"),
    ('[].max() == 0', "max: empty list"),
    ('"a".max() == 0', "max: expected a list, got StringType"),
    ('"abc".matches("(")', "invalid regex '('"),
    ('"abc".find("(a)\\\\1") == ""', "invalid regex"),
    ('quantity(1).isInteger()', "quantity: expected a string, got IntType"),
    ('quantity("1x").isInteger()', "1x"),
    ('quantity("1").add(true).isInteger()', "add: expected a quantity, got BoolType"),
    ('quantity("1").sub("1").isInteger()', "sub: expected a quantity, got StringType"),
    ('quantity("1500m").asInteger() == 1', "cannot convert value 1500m to an integer"),
    ('semver(1).major() == 1', "semver: expected a string, got IntType"),
    ('semver("v1.2").major() == 1', "v1.2"),
    ('quantity("1").major() == 1', "major: expected a semver, got Quantity"),
    ('quantity("1").minor() == 1', "minor: expected a semver, got Quantity"),
    ('quantity("1").patch() == 1', "patch: expected a semver, got Quantity"),
    ('semver("1.0.0").sign() == 1', "sign: expected a quantity, got Semver"),
    ('semver("1.0.0").isInteger()', "isInteger: expected a quantity, got Semver"),
    ('semver("1.0.0").asApproximateFloat() == 1.0', "asApproximateFloat: expected a quantity, got Semver"),
    ('quantity("1").compareTo(semver("1.0.0")) == 0', "compareTo: expected a quantity, got Semver"),
    ('semver("1.0.0").isLessThan(quantity("1"))', "isLessThan: expected a semver, got Quantity"),
    ('"1".isGreaterThan("0")', "isGreaterThan: expected a quantity or a semver, got StringType"),
    ('(1).upperAscii() == ""', "upperAscii: expected a string, got IntType"),
    ('(1).reverse() == ""', "reverse: expected a string, got IntType"),
    ('(1).trim() == ""', "trim: expected a string, got IntType"),
    # a function handed another function's error passes that error on, it does not word its own
    ('quantity("bad").isGreaterThan(quantity("1"))', "bad"),
    ('"a".charAt(9).upperAscii() == ""', "charAt: index out of range: 9"),
]


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(("expression", "why"), ERRORS)
def test_library_function_out_of_its_domain_is_a_runtime_error_saying_why(expression, why, compiled):
    with pytest.raises(cel.CelError) as e:
        _run(expression, compiled)
    assert "CEL runtime error" in str(e.value)
    assert why in str(e.value)


def test_a_lists_min_compiles_on_the_default_runner():
    # cel-python's compiled runner takes `.min()` for a macro without its variable; carve runs such a
    # selector on the interpreted runner, so a tenant's `[...].min()` works as in Kubernetes
    program = cel.compile_selector('device.attributes["gpu.carve.dev"].n == [5, 3, 4].min()')
    assert program.evaluate(DEVICE) is True
    assert cel.compile_selector('[2, 1].min() == 1 && has(device.attributes["gpu.carve.dev"].n)')\
        .evaluate(DEVICE) is True


def test_an_error_operand_is_passed_on_unchanged_by_each_function():
    err = cel_library.quantity("bad")
    assert cel_library.isGreaterThan(err, cel_library.quantity("1")) is err
    assert cel_library.charAt("abc", err) is err
    assert "bad" in str(err.args[0])


def test_is_quantity_and_is_semver_of_a_non_string_are_false_not_errors():
    assert cel_library.isQuantity(1) is not None and not cel_library.isQuantity(1)
    assert not cel_library.isSemver(1)
    assert not cel_library.isSemver(1, True)


def _spent(call, *args) -> int:
    """The units one call charges: the least limit it runs within."""
    for limit in range(0, 400):
        cel_cost.Meter.start(limit)
        try:
            call(*args)
            over = None
        except cel_cost.CostLimitExceeded as e:
            over = str(e)
        if cel_cost.Meter.stop() is None and over is None:
            return limit
    raise AssertionError("more than 400 units")


@pytest.mark.parametrize(("call", "args", "units"), [
    # one unit a call, plus a tenth of a unit per character or element it is handed (rounded up)
    (cel_library.reverse, ("",), 1),
    (cel_library.reverse, ("a",), 2),
    (cel_library.reverse, ("a" * 10,), 2),
    (cel_library.reverse, ("a" * 11,), 3),
    (cel_library.charAt, ("a" * 20, 1), 3),
    (cel_library.indexOf, ("a" * 15, "a" * 6), 4),
    (cel_library.list_sum, ([1] * 21,), 4),
    (cel_library.quantity, ("1",), 2),
    # a regex: the call, then text / 10 times pattern / 4 (cel-go's regex cost)
    (cel_library.matches, ("a" * 20, "a" * 8), 1 + 3 + 2 * 2),
    (cel_library.find, ("a" * 30, "a"), 1 + 4 + 3 * 1),
    # replace charges the string it builds before building it
    (cel_library.replace, ("a" * 10, "a", "bb"), 1 + 2 + 3),
    (cel_library.replace, ("a" * 10, "a", "bb", 5), 1 + 2 + 2),
])
def test_each_call_charges_the_meter_in_cel_go_units(call, args, units):
    assert _spent(call, *args) == units


def test_a_meter_over_budget_refuses_every_later_call_with_its_first_reason():
    cel_cost.Meter.start(3)
    with pytest.raises(cel_cost.CostLimitExceeded, match="more than 3 units"):
        cel_cost.Meter.charge(4)
    with pytest.raises(cel_cost.CostLimitExceeded, match="more than 3 units"):
        cel_cost.Meter.charge(0)
    why = "CEL cost limit exceeded: more than 3 units (the API server's limit)"
    assert cel_cost.Meter.stop() == why
    assert cel_cost.Meter.last_reason() == why
    cel_cost.Meter.charge(10**9)  # no evaluation running: nothing to charge


def test_a_meter_exactly_at_its_limit_is_within_budget():
    cel_cost.Meter.start(5)
    cel_cost.Meter.charge(2)
    cel_cost.Meter.charge(3)
    assert cel_cost.Meter.stop() is None
    assert cel_cost.Meter.last_reason() == ""
