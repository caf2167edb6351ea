"""Bounded evaluation of tenant selectors: RE2 regexes, the compile-time cost estimate, the runtime meter."""

import subprocess
import sys
import textwrap

import pytest
from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, slice_

from driver.allocator import Allocator, Unallocatable, cel, cel_cost

DRIVER = "gpu.carve.dev"
NAME = f'device.attributes["{DRIVER}"].label'
EVIL = "a" * 40 + "!"  # "(a+)+$" backtracks 2**40 times on this in Python's re


def device(name: str) -> object:
    return cel.device_value(DRIVER, {"label": {"string": name}}, {}, False)


def run(code: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(("form", "answer"), [
    (f'{NAME}.matches("(a+)+$")', False),
    (f'{NAME}.find("(a+)+$") == ""', True),
    (f'{NAME}.findAll("(a+)+$").size() == 0', True),
])
def test_catastrophic_backtracking_selector_gives_the_re2_answer(compiled, form, answer):
    # A hang here would be the bug: RE2 is linear, so this returns at once on any machine.
    assert cel.compile_selector(form, compiled).evaluate(device(EVIL)) is answer


def test_pythons_backtracking_re_would_not_finish_the_same_selector():
    # The baseline the RE2 test replaces: 2**40 steps is hours on any machine, so 5 s never suffices.
    with pytest.raises(subprocess.TimeoutExpired):
        run(f"import re; re.search(r'(a+)+$', {EVIL!r})", timeout=5)


def test_backtracking_selector_in_a_fresh_process_finishes_well_within_its_budget():
    # The whole path from a fresh interpreter (parser build included), through carve's CEL.
    out = run(f"""
        from driver.allocator import cel
        d = cel.device_value({DRIVER!r}, {{"label": {{"string": {EVIL!r}}}}}, {{}}, False)
        print(cel.compile_selector({NAME + '.matches("(a+)+$")'!r}).evaluate(d))
        """, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("compiled", [True, False])
def test_regex_functions_follow_re2_syntax(compiled):
    # Python's re accepts backreferences and lookahead; RE2 (cel-go) does not.
    with pytest.raises(cel.CelError, match=r"invalid regex '\(a\)\\\\1'"):
        cel.compile_selector(f'{NAME}.matches("(a)\\\\1")', compiled).evaluate(device("aa"))
    with pytest.raises(cel.CelError, match="invalid regex"):
        cel.compile_selector(f'{NAME}.find("a(?=b)") == "a"', compiled).evaluate(device("ab"))


@pytest.mark.parametrize("compiled", [True, False])
def test_find_and_find_all_return_the_leftmost_matches(compiled):
    d = device("gpu-12-slot-3")
    assert cel.compile_selector(f'{NAME}.find("[0-9]+") == "12"', compiled).evaluate(d)
    assert cel.compile_selector(f'{NAME}.findAll("[0-9]+") == ["12", "3"]', compiled).evaluate(d)
    assert cel.compile_selector(f'{NAME}.findAll("[0-9]+", 1) == ["12"]', compiled).evaluate(d)
    assert cel.compile_selector(f'{NAME}.matches("^gpu-[0-9]+")', compiled).evaluate(d)


def test_expression_whose_worst_case_exceeds_the_limit_does_not_compile():
    # Each replace may multiply the string's length by ten: the API server's estimate rejects this.
    growing = NAME + '.replace("a", "aaaaaaaaaa")' * 8 + ' == ""'
    with pytest.raises(cel.CelError, match=r"too complex: worst-case cost \d+ exceeds the limit of 1000000"):
        cel.compile_selector(growing)


def test_nested_macros_over_large_literal_lists_do_not_compile():
    big = "[" + ",".join(["1"] * 1500) + "]"
    with pytest.raises(cel.CelError, match="too complex"):
        cel.compile_selector(f"{big}.all(x, {big}.all(y, x == y))")


def test_ordinary_selectors_stay_far_below_the_limit():
    node = cel.cel_ast.reduce(cel._PARSER.parse(
        f'{NAME}.matches("^A100") && device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'))
    assert cel_cost.estimate(node).cost < cel_cost.MAX_COST // 100


@pytest.mark.parametrize("compiled", [True, False])
def test_runtime_cost_limit_stops_an_evaluation_and_is_not_absorbed(compiled):
    # A slice read from a file is not held to the API's 64-character strings; the meter is.
    # ...and it is reported as the budget it is, not as an ordinary runtime error that || could absorb.
    long = device("a" * 3_000_000)
    with pytest.raises(cel.CelError, match=r"^CEL cost limit exceeded: more than 1000000 units"):
        cel.compile_selector(f'{NAME}.matches("bbbbbbbbbbbbbbbb") || true', compiled).evaluate(long)


def test_wall_clock_backstop_stops_an_evaluation(monkeypatch):
    monkeypatch.setattr(cel_cost.Meter, "seconds", -1.0)
    with pytest.raises(cel.CelError, match="took more than"):
        cel.compile_selector(f'{NAME}.lowerAscii() == "x"').evaluate(device("X"))


def test_meter_is_per_evaluation():
    long = device("a" * 3_000_000)
    program = cel.compile_selector(f'{NAME}.matches("bbbbbbbbbbbbbbbb")')
    with pytest.raises(cel.CelError):
        program.evaluate(long)
    assert program.evaluate(device("bbbbbbbbbbbbbbbb")) is True


def test_an_over_budget_selector_fails_only_its_claim():
    slices = [slice_("a", [dev("g0", label=EVIL), dev("g1", label="ok")])]
    a = Allocator(slices, CLASSES)
    too_complex = NAME + '.replace("a", "aaaaaaaaaa")' * 8 + ' == ""'
    with pytest.raises(Unallocatable, match="too complex"):
        a.allocate(claim("bad", exactly("r", selectors=[too_complex])))
    good = claim("good", exactly("r", selectors=[f'{NAME}.matches("(a+)+$") || {NAME} == "ok"']))
    assert devices_of(a.allocate(good)) == [("r", "n1", "g1")]


def test_replace_is_charged_for_the_string_it_builds():
    # 3M characters become 12M: the result's size is charged before it is built.
    long = device("a" * 3_000_000)
    with pytest.raises(cel.CelError, match="cost limit exceeded"):
        cel.compile_selector(f'{NAME}.replace("a", "aaaa") == ""').evaluate(long)


def test_replace_with_a_count_is_charged_only_for_the_replacements_it_makes():
    # replace(old, new, 1) on 3M characters builds 3M + 3 characters: within budget, where the unbounded
    # replace above is not (each hit past the count would be charged for a string never built).
    long = device("a" * 3_000_000)
    assert cel.compile_selector(f'{NAME}.replace("a", "aaaa", 1).size() == 3000003').evaluate(long) is True
    with pytest.raises(cel.CelError, match="cost limit exceeded"):
        cel.compile_selector(f'{NAME}.replace("a", "aaaa", -1).size() == 0').evaluate(long)


def test_a_replace_is_estimated_at_the_string_it_may_build_times_its_replacement():
    # Each of the label's characters may become 1,000, twice: 10^6 times the label's length to traverse, which
    # the estimate refuses at compile time; one such replace is within the limit.
    wide = "b" * 1000
    once = f'{NAME}.replace("a", "{wide}") == ""'
    cel.compile_selector(once)
    with pytest.raises(cel.CelError, match="too complex: worst-case cost"):
        cel.compile_selector(f'{NAME}.replace("a", "{wide}").replace("b", "{wide}") == ""')


@pytest.mark.parametrize("op", ["&&", "||"])
def test_both_sides_of_a_logical_operator_count_toward_the_estimate(op):
    # Each side is about 58% of the limit (two replaces by 300 characters on a 64-character label); CEL
    # may evaluate both, so together they are over it.
    wide = "b" * 300
    side = f'{NAME}.replace("a", "{wide}").replace("b", "{wide}") == ""'
    other = f'{NAME}.replace("c", "{wide}").replace("b", "{wide}") == ""'
    cel.compile_selector(side)
    with pytest.raises(cel.CelError, match="too complex: worst-case cost"):
        cel.compile_selector(f"{side} {op} {other}")


def _estimate(expression: str) -> cel_cost.Estimate:
    cel.compile_selector("true")  # the parser is made with the first environment
    return cel_cost.estimate(cel.cel_ast.reduce(cel._PARSER.parse(expression)))


@pytest.mark.parametrize(("expression", "size", "item"), [
    ("device.driver", cel_cost.MAX_ATTRIBUTE_LENGTH, 1),
    (NAME, cel_cost.MAX_ATTRIBUTE_LENGTH, 1),
    (f'device.capacity["{DRIVER}"].memory', cel_cost.MAX_ATTRIBUTE_LENGTH, 1),
    # a domain's map: at most 32 entries (ResourceSliceMaxAttributesAndCapacitiesPerDevice), each value at
    # most 64 characters (DeviceAttributeMaxValueLength)
    (f'device.attributes["{DRIVER}"]', cel_cost.MAX_DOMAIN_ENTRIES, cel_cost.MAX_ATTRIBUTE_LENGTH),
    ('"abc"', 3, 1),
    ("7", 1, 1),
])
def test_each_leaf_costs_one_unit_and_is_as_large_as_the_api_allows(expression, size, item):
    assert _estimate(expression) == cel_cost.Estimate(1, size, item)


@pytest.mark.parametrize(("expression", "estimate"), [
    ("[]", cel_cost.Estimate(1, 0, 1)),  # no element: the size of one is the smallest, 1
    ('["abc", "de"]', cel_cost.Estimate(1 + 2, 2, 3)),  # a unit per node; 2 elements, the largest 3
    # join: the list (3) and separator (1), the call (1), traversing 2 elements of at most 3 characters
    # (0.6, a unit); the string built is at most 2 x (3 + 1) characters
    ('["abc", "de"].join("-")', cel_cost.Estimate(3 + 1 + 1 + 1, 2 * (3 + 1))),
])
def test_a_list_literal_and_its_join_are_estimated_by_their_elements(expression, estimate):
    assert _estimate(expression) == estimate


# Each string function: a unit for the call and one per operand node (its "base"), then the work the module
# docstring gives it, with traversal at 0.1 a character rounded up; and the size of what it returns.
@pytest.mark.parametrize(("expression", "estimate"), [
    # base 3, traversing 3 characters (1); at most 4 parts of at most 3 characters
    ('"a,b".split(",")', cel_cost.Estimate(3 + 1, 3 + 1, 3)),
    ('"abc".upperAscii()', cel_cost.Estimate(2 + 1, 3)),  # base 2, traversal 1; as long as its input
    ('"abc".contains("b")', cel_cost.Estimate(3 + 1 * 1)),  # traversal of each side, multiplied
    ('"abc".matches("b+")', cel_cost.Estimate(3 + 1 * 1, 3)),  # cel-go's regex cost: 1 x ceil(2 x 0.25)
    ('"abc".replace("b", "xy")', cel_cost.Estimate(4 + 1 * 2, 3 * 2)),  # each character may become "xy"
    ("[1, 2].sum()", cel_cost.Estimate(1 + 3 + 2)),  # the call, the list (3), a unit per element
])
def test_each_function_is_estimated_by_its_rule(expression, estimate):
    assert _estimate(expression) == estimate


def test_a_macro_over_a_domain_costs_its_body_once_per_entry_the_domain_may_hold():
    # exists over device.attributes[d]: 1 (the call) + 1 (the domain) + 32 x (body + 1), the body
    # `k == "x"` being 1 + 1 (k) + 1 ("x") + 1 (comparing at most one character's traversal)
    body = 4
    assert _estimate(f'device.attributes["{DRIVER}"].exists(k, k == "x")').cost == 2 + 32 * (body + 1)
    # `in` scans every entry: 1 + 1 + 1 + 32 entries x 1 unit of traversal of the 1-character key
    assert _estimate(f'"x" in device.attributes["{DRIVER}"]').cost == 3 + 32
