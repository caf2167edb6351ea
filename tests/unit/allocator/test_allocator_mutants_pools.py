"""Survivors of generated mutants in driver/allocator (docs/testing.md, "Generated mutants"), killed through
what a user sees: a pool whose devices repeat a name or consume counters it does not publish is skipped with
its reason; a request's count must be an integer; a range with only a max; the nodes only devices name;
the explanation's selector counts; CEL's lastIndexOf, findAll and quantity bounds and equality; and the CEL
budget's estimate of join and of startsWith/endsWith/contains."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, devices_of, exactly, slice_
from celpy import celtypes

from driver.allocator import cel, cel_cost
from driver.allocator.allocator import Unallocatable, allocate

COUNTERS = [{"name": "gpu-0", "counters": {"slices": {"value": "7"}}}]


def _mig(name, counter_set="gpu-0", counter="slices"):
    return dev(name, "mig", consumes=[{"counterSet": counter_set, "counters": {counter: {"value": "3"}}}])


def test_a_pool_whose_slices_repeat_a_device_name_is_skipped_with_its_reason():
    slices = [slice_("a", [dev("g0")], count=2), slice_("b", [dev("g0")], count=2)]
    with pytest.raises(Unallocatable, match="duplicate device name g0"):
        allocate(claim("c", exactly("r")), slices, CLASSES)
    good = [slice_("a", [dev("g0")], count=2), slice_("b", [dev("g1")], count=2)]
    assert devices_of(allocate(claim("c", exactly("r", count=2)), good, CLASSES)) == [
        ("r", "n1", "g0"), ("r", "n1", "g1")]


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        (_mig("m1", counter_set="gpu-9"), "device m1: counter set gpu-9 not found"),
        (_mig("m1", counter="cores"), "device m1: counter cores not found in counter set gpu-0"),
    ],
)
def test_a_pool_whose_device_consumes_an_unpublished_counter_is_skipped_with_its_reason(device, reason):
    slices = [slice_("a", [_mig("m0"), device], counters=COUNTERS)]
    with pytest.raises(Unallocatable, match=reason):
        allocate(claim("c", exactly("r", cls="mig")), slices, CLASSES)
    fine = [slice_("a", [_mig("m0"), _mig("m1")], counters=COUNTERS)]
    assert devices_of(allocate(claim("c", exactly("r", cls="mig")), fine, CLASSES)) == [("r", "n1", "m0")]


@pytest.mark.parametrize("count", [True, "2", 1.0])
def test_a_requests_count_must_be_an_integer(count):
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    # the claim is refused naming its request and field, never allocated with count 1 (True == 1)
    refused = f"request r: count: expected an integer, got {type(count).__name__}"
    with pytest.raises(Unallocatable, match=refused):
        allocate(claim("c", exactly("r", count=count)), slices, CLASSES)


def test_last_index_of_on_a_list_is_the_last_position_or_minus_one():
    empty = celtypes.MapType({})
    assert cel.evaluate("[1, 2, 1, 3].lastIndexOf(1) == 2", empty)
    assert cel.evaluate('["a", "b"].lastIndexOf("b") == 1', empty)
    assert cel.evaluate('["a", "b"].lastIndexOf("c") == -1', empty)
    assert cel.evaluate("[].lastIndexOf(1) == -1", empty)


def test_a_request_over_a_range_given_only_its_max_is_refused():
    # a request policy whose validRange names only a max still caps the request (the range's other bounds
    # are optional to the model: a slice from a file is not validated by an API server)
    policy = {"validRange": {"max": "4Gi"}}
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True, policy=policy)])]
    with pytest.raises(Unallocatable, match=r"memory 6Gi: must be 0\.\.4Gi \(the device's request policy\)"):
        allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": "6Gi"})), slices, CLASSES)
    out = allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": "3Gi"})), slices, CLASSES)
    assert out["devices"]["results"][0]["consumedCapacity"] == {"memory": "3Gi"}


def test_find_all_with_a_limit_of_zero_finds_nothing():
    # Kubernetes' regex library: findAll(re, n) returns at most n matches, n < 0 all of them
    empty = celtypes.MapType({})
    assert cel.evaluate('"a1b2c3".findAll("[0-9]", 0) == []', empty)
    assert cel.evaluate('"a1b2c3".findAll("[0-9]", 1) == ["1"]', empty)
    assert cel.evaluate('"a1b2c3".findAll("[0-9]", -1) == ["1", "2", "3"]', empty)


def _cost(expr: str) -> int:
    cel.compile_selector("true")  # sets up the parser
    return cel_cost.estimate(cel.cel_ast.reduce(cel._PARSER.parse(expr))).cost


@pytest.mark.parametrize("items", ['device.attributes["gpu.carve.dev"].names', '["ab", "cd"]'])
def test_a_joined_string_costs_more_to_traverse_the_longer_its_separator(items):
    # join's result holds every item and a separator between each two: the CEL budget's estimate of what
    # reads the result grows with the separator, whatever the items' size
    costs = [_cost(f'{items}.join("{"-" * n}").lowerAscii() == "x"') for n in (1, 10, 40)]
    assert costs[0] < costs[1] < costs[2], costs


def _name_is(*values):
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(values)}]}


def test_without_a_node_the_nodes_that_only_devices_name_are_tried():
    # perDeviceNodeSelection: the slice names no node, each device names its own (nodeName or a selector);
    # `carve allocate` without --node tries every node some slice or device names
    s = slice_("s", [], node=None, pool="p")
    del s["spec"]["allNodes"]
    s["spec"]["perDeviceNodeSelection"] = True
    s["spec"]["devices"] = [{**dev("d0"), "nodeName": "n7"}]
    out = allocate(claim("c", exactly("r")), [s], CLASSES)
    assert devices_of(out) == [("r", "p", "d0")]
    assert "n7" in str(out["nodeSelector"])
    s["spec"]["devices"] = [{**dev("d1"), "nodeSelector": {"nodeSelectorTerms": [_name_is("n8")]}}]
    out = allocate(claim("c", exactly("r")), [s], CLASSES)
    assert devices_of(out) == [("r", "p", "d1")]
    assert "n8" in str(out["nodeSelector"])


@pytest.mark.parametrize(("value", "fits"), [
    ("-9223372036854775808", True), ("9223372036854775807", True), ("-100", True),
    ("-9223372036854775809", False), ("9223372036854775808", False),
])
def test_as_integer_takes_every_int64_and_nothing_past_it(value, fits):
    empty = celtypes.MapType({})
    assert cel.evaluate(f'quantity("{value}").isInteger()', empty) == fits
    if fits:
        assert cel.evaluate(f'quantity("{value}").asInteger() == {value}', empty)
    else:
        with pytest.raises(cel.CelError, match=f"cannot convert value {value} to an integer"):
            cel.evaluate(f'quantity("{value}").asInteger() != 0', empty)


KEPT = "match the request's selectors"


def test_the_explanation_counts_the_devices_the_requests_own_selectors_keep():
    # "why not" is what a user reads on a pending claim: how many devices the class matched, and how many
    # of those the request's selectors kept
    slices = [slice_("a", [dev("g0", model="t4"), dev("g1", model="t4"), dev("v0", "vgpu")])]
    wants = f'device.attributes["{DRIVER}"].model == "a100"'
    with pytest.raises(Unallocatable, match=rf"2 of 3 devices match class gpu, 0 also {KEPT}"):
        allocate(claim("c", exactly("r", selectors=[wants])), slices, CLASSES)
    one = f'device.attributes["{DRIVER}"].uuid == "g1"'
    with pytest.raises(Unallocatable, match=rf"2 of 3 devices match class gpu, 1 also {KEPT}"):
        allocate(claim("c", exactly("r", count=2, selectors=[one])), slices, CLASSES)


@pytest.mark.parametrize("fn", ["startsWith", "endsWith", "contains"])
def test_a_longer_string_to_look_for_costs_more(fn):
    # Kubernetes' estimate for these: the receiver's traversal times the argument's; a selector looking for a
    # long prefix in every device name must count more against the budget than one looking for a letter
    name = f'device.attributes["{DRIVER}"].name'
    short, long = (_cost(f'{name}.{fn}("{"a" * n}")') for n in (1, 200))
    assert long > short, (short, long)


def test_last_index_of_with_an_offset_finds_the_last_match_starting_at_or_before_it():
    empty = celtypes.MapType({})
    assert cel.evaluate('"abcabc".lastIndexOf("abc", 2) == 0', empty)
    assert cel.evaluate('"abcabc".lastIndexOf("abc", 4) == 3', empty)
    assert cel.evaluate('"abcabc".lastIndexOf("abc", 6) == 3', empty)
    assert cel.evaluate('"xabc".lastIndexOf("x", 0) == 0', empty)


def test_quantities_are_equal_by_value_in_either_order():
    empty = celtypes.MapType({})
    assert cel.evaluate('quantity("1Gi") == quantity("1024Mi")', empty)
    for a, b in (("2Gi", "1Gi"), ("1Gi", "2Gi")):
        assert not cel.evaluate(f'quantity("{a}") == quantity("{b}")', empty)
        assert cel.evaluate(f'quantity("{a}") != quantity("{b}")', empty)


def test_a_longer_regex_costs_more():
    # Kubernetes' estimate for matches/find: the string's traversal times the pattern's length factor
    name = f'device.attributes["{DRIVER}"].name'
    short, long = (_cost(f'{name}.matches("{"a" * n}")') for n in (1, 400))
    assert long > short, (short, long)


def test_a_regex_costs_the_strings_traversal_times_a_quarter_of_the_patterns_length():
    # Kubernetes' cost model: stringTraversalCostFactor 0.1 per character of the string, times
    # regexStringLengthCostFactor 0.25 per character of the pattern (each rounded up)
    text = "x" * 100
    costs = {n: _cost(f'"{text}".matches("{"a" * n}")') for n in (8, 40)}
    assert costs[40] - costs[8] == 10 * (10 - 2), costs


def test_a_claim_that_fits_no_node_names_the_first_nodes_and_counts_the_rest():
    from driver.allocator.explain import NODES_IN_DETAIL

    def slices(n):
        return [slice_(f"s{i}", [dev(f"g{i}")], node=f"n{i}") for i in range(n)]

    wants = claim("c", exactly("r", count=2))  # one GPU per node: fits none
    with pytest.raises(Unallocatable) as few:
        allocate(wants, slices(NODES_IN_DETAIL), CLASSES)
    assert f"does not fit on any of {NODES_IN_DETAIL} nodes" in str(few.value)
    assert "more nodes" not in str(few.value)
    with pytest.raises(Unallocatable, match=f"of {NODES_IN_DETAIL + 2} nodes; .*; 2 more nodes$"):
        allocate(wants, slices(NODES_IN_DETAIL + 2), CLASSES)
