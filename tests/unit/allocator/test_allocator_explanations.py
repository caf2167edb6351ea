"""Why a claim does not fit, in the words `carve allocate`, the controller's Events and the simulator
print (driver/allocator/explain.py): per node, per request, the class and selector counts, and each device's
reason (capacity, counters, taints, use), then what the constraints or the competition rule out."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, exactly, klass, slice_

from driver.allocator.allocator import Unallocatable, allocate

TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}
COUNTERS = [{"name": "gpu-0", "counters": {"slices": {"value": "2"}}}]


def why(c, slices, classes=CLASSES, node="n1"):
    with pytest.raises(Unallocatable) as e:
        allocate(c, slices, classes, (), node)
    return e.value.reason


def test_no_slices_at_all():
    assert why(claim("c", exactly("r")), [], node=None) == "claim default/c: no ResourceSlices"


def test_a_request_short_of_devices_counts_those_of_its_class():
    assert why(claim("c", exactly("r", count=2)), [slice_("a", [dev("g0"), dev("v0", "vgpu")])]) == (
        "claim default/c does not fit on node n1: request r needs 2 devices: 1 of 2 devices match class gpu; "
        "1 usable")
    two = [slice_("a", [dev("g0"), dev("v0", "vgpu")])]
    assert why(claim("c", exactly("r", count=2)), two, node=None) == (
        "claim default/c does not fit on node n1: request r needs 2 devices: 1 of 2 devices match class gpu; "
        "1 usable")


def test_the_requests_own_selectors_are_counted_apart():
    c = claim("c", exactly("r", count=2, selectors=[f'device.attributes["{DRIVER}"].x == 1']))
    assert why(c, [slice_("a", [dev("g0", x=1), dev("g1", x=2), dev("v0", "vgpu", x=1)])]) == (
        "claim default/c does not fit on node n1: request r needs 2 devices: 2 of 3 devices match class gpu, "
        "1 also match the request's selectors; 1 usable")


def test_each_device_says_why_it_is_ruled_out_three_at_most():
    devices = [dev("g0", memory="2Gi"), dev("g1"), dev("g2", taints=[TAINT], memory="8Gi"),
               dev("g3", memory="1Gi"), dev("g4", memory="1Gi")]
    assert why(claim("c", exactly("r", capacity={"memory": "4Gi"})), [slice_("a", devices)]) == (
        "claim default/c does not fit on node n1: request r needs 1 device: 5 of 5 devices match class gpu; "
        "0 usable; g0: memory 4Gi requested, 2Gi left; g1: has no capacity memory; "
        "g2: taint k=v:NoSchedule is not tolerated; 2 more ruled out")
    exactly_three = [dev("g0", memory="2Gi"), dev("g1"), dev("g2", taints=[TAINT], memory="8Gi")]
    assert why(claim("c", exactly("r", capacity={"memory": "4Gi"})), [slice_("a", exactly_three)]).endswith(
        "g2: taint k=v:NoSchedule is not tolerated")


def test_a_device_whose_counters_are_short_says_which():
    mig = dev("m0", "mig", consumes=[{"counterSet": "gpu-0", "counters": {"slices": {"value": "3"}}}])
    assert why(claim("c", exactly("r", cls="mig")), [slice_("a", [mig], counters=COUNTERS)]) == (
        "claim default/c does not fit on node n1: request r needs 1 device: 1 of 1 devices match class mig; "
        "0 usable; m0: counter gpu-0/slices: 3 needed, 2 left")


def test_a_device_another_claim_holds_is_in_use():
    slices = [slice_("a", [dev("g0")])]
    held = claim("held", exactly("r"), uid="u1")
    held["status"] = {"allocation": allocate(held, slices, CLASSES)}
    with pytest.raises(Unallocatable) as e:
        allocate(claim("c", exactly("r")), slices, CLASSES, [held], "n1")
    assert e.value.reason == ("claim default/c does not fit on node n1: request r needs 1 device: 1 of 1 "
                              "devices match class gpu; 0 usable; g0: in use by another claim")


def test_requests_that_fit_alone_but_not_together_say_so():
    constrained = claim("c", exactly("r", count=2), constraints=[{"distinctAttribute": f"{DRIVER}/x"}])
    assert why(constrained, [slice_("a", [dev("g0", x=1), dev("g1", x=1)])]) == (
        "claim default/c does not fit on node n1: each request fits on its own, but not together: the "
        f"constraints (distinctAttribute {DRIVER}/x) rule out every combination")
    matched = claim("c", exactly("r", count=2), constraints=[{"matchAttribute": f"{DRIVER}/x"}])
    assert why(matched, [slice_("a", [dev("g0", x=1), dev("g1", x=2)])]).endswith(
        f"the constraints (matchAttribute {DRIVER}/x) rule out every combination")
    assert why(claim("c", exactly("r"), exactly("s", mode="All")), [slice_("a", [dev("g0")])]) == (
        "claim default/c does not fit on node n1: each request fits on its own, but not together: the "
        "requests compete for the same devices")


def test_every_node_tried_is_named_two_in_detail():
    three = [slice_("a", [dev("g0")], node="n1"), slice_("b", [dev("g0")], node="n2"),
             slice_("c", [dev("g0")], node="n3")]
    line = "request r needs 2 devices: 1 of 1 devices match class gpu; 1 usable"
    assert why(claim("c", exactly("r", count=2)), three, node=None) == (
        f"claim default/c does not fit on any of 3 nodes; n1: {line}; n2: {line}; 1 more nodes")
    assert why(claim("c", exactly("r", count=2)), three[:2], node=None) == (
        f"claim default/c does not fit on any of 2 nodes; n1: {line}; n2: {line}")


def test_each_alternative_of_a_first_available_request_is_explained():
    c = claim("c", {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "mig"},
                                                    {"name": "b", "deviceClassName": "gpu", "count": 2}]})
    assert why(c, [slice_("a", [dev("g0")])]) == (
        "claim default/c does not fit on node n1: request r/a needs 1 device: 0 of 1 devices match class mig "
        "/ request r/b needs 2 devices: 1 of 1 devices match class gpu; 1 usable")


def test_an_all_devices_request_names_the_device_it_cannot_take():
    slices = [slice_("a", [dev("g0"), dev("g1", taints=[TAINT])])]
    assert why(claim("c", exactly("r", mode="All")), slices) == (
        "claim default/c does not fit on node n1: request r needs all matching devices: 2 of 2 devices match "
        "class gpu; 1 usable; g1: taint k=v:NoSchedule is not tolerated")


def test_a_selector_error_names_the_claim_once_and_the_request_or_class():
    c = claim("c", exactly("r", selectors=[f'device.attributes["{DRIVER}"].x == 1']))
    assert why(c, [slice_("a", [dev("g0", x=2), dev("g1")])]) == (
        f"claim default/c: request r: selector #0 on device {DRIVER}/n1/g1: CEL runtime error: no such "
        f"key: 'x' (expression: device.attributes[\"{DRIVER}\"].x == 1)")
    bad = klass("bad", expr=f'device.attributes["{DRIVER}"].nope == 1')
    assert why(claim("c", exactly("r", cls="bad")), [slice_("a", [dev("g0")])], [*CLASSES, bad]) == (
        f"claim default/c: class bad: selector #0 on device {DRIVER}/n1/g0: CEL runtime error: no such key: "
        f"'nope' (expression: device.attributes[\"{DRIVER}\"].nope == 1)")


def test_a_selector_error_of_a_request_the_search_never_reached_is_explained():
    # r0 has no device at all, so the search stops before trying r1's devices; the explanation still
    # evaluates r1's selectors and shows the first error, named as the allocator names it
    slices = [slice_("a", [dev("g0", x=1), dev("g1")])]
    c = claim("c", exactly("r0", cls="mig"),
              exactly("r1", selectors=[f'device.attributes["{DRIVER}"].x == 1']))
    assert why(c, slices) == (
        "claim default/c does not fit on node n1: request r0 needs 1 device: 0 of 2 devices match class mig; "
        "request r1 needs 1 device: 2 of 2 devices match class gpu, 1 also match the request's selectors; "
        f"request r1: selector #0 on device {DRIVER}/n1/g1: CEL runtime error: no such key: 'x' "
        f"(expression: device.attributes[\"{DRIVER}\"].x == 1)")
    bad = klass("bad", expr=f'device.attributes["{DRIVER}"].x == 1')
    c = claim("c", exactly("r0", cls="mig"), exactly("r1", cls="bad"))
    assert why(c, slices, [*CLASSES, bad]) == (
        "claim default/c does not fit on node n1: request r0 needs 1 device: 0 of 2 devices match class mig; "
        "request r1 needs 1 device: 1 of 2 devices match class bad; "
        f"class bad: selector #0 on device {DRIVER}/n1/g1: CEL runtime error: no such key: 'x' "
        f"(expression: device.attributes[\"{DRIVER}\"].x == 1)")
