"""Which nodes a slice with a nodeSelector serves: `metadata.name` fields as the scheduler reads them."""

import json

import pytest
from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, slice_

from driver.allocator import Unallocatable, allocate


def selected(name, devices, *terms, pool="far"):
    s = slice_(name, devices, node=None, pool=pool)
    del s["spec"]["allNodes"]
    s["spec"]["nodeSelector"] = {"nodeSelectorTerms": list(terms)}
    return s


def name_is(op, *values):
    return {"matchFields": [{"key": "metadata.name", "operator": op, "values": list(values)}]}


LABEL = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]}


def test_devices_of_a_slice_that_selects_another_node_are_not_allocated():
    # The failing case of issue 12 item 12: far-0 was allocated on n1 though its slice selects n2.
    slices = [slice_("s1", [dev("gpu-0")], node="n1"), selected("s2", [dev("far-0")], name_is("In", "n2"))]
    with pytest.raises(Unallocatable, match="1 of 1 devices match class gpu"):
        allocate(claim("c", exactly("g", count=2)), slices, CLASSES, node="n1")


def test_a_slice_that_selects_the_node_by_name_serves_it():
    slices = [slice_("s1", [dev("gpu-0")], node="n1"), selected("s2", [dev("far-0")], name_is("In", "n1"))]
    out = allocate(claim("c", exactly("g", count=2)), slices, CLASSES, node="n1")
    assert devices_of(out) == [("g", "far", "far-0"), ("g", "n1", "gpu-0")]


def test_not_in_excludes_only_the_named_node():
    slices = [selected("s", [dev("far-0")], name_is("NotIn", "n1")),
              slice_("a", [dev("g")], node="n1"), slice_("b", [dev("g")], node="n2")]
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r", selectors=['device.attributes["gpu.carve.dev"].uuid == "far-0"'])),
                 slices, CLASSES, node="n1")
    out = allocate(claim("c", exactly("r", count=2)), slices, CLASSES, node="n2")
    assert devices_of(out)[0][2] == "far-0"


def test_without_a_node_the_node_the_selector_names_is_tried():
    out = allocate(claim("c", exactly("r")), [selected("s", [dev("far-0")], name_is("In", "n7"))], CLASSES)
    assert devices_of(out) == [("r", "far", "far-0")]
    assert out["nodeSelector"]["nodeSelectorTerms"] == [name_is("In", "n7")]


def test_terms_are_ored_and_label_expressions_are_taken_to_hold():
    slices = [selected("s", [dev("far-0")], name_is("In", "n2"), LABEL)]
    assert devices_of(allocate(claim("c", exactly("r")), slices, CLASSES, node="n1"))[0][2] == "far-0"
    both = {**name_is("In", "n2"), **LABEL}  # one term: name AND labels
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r")), [selected("s", [dev("far-0")], both)], CLASSES, node="n1")


@pytest.mark.parametrize("term", [
    {},                                                       # an empty term selects no node
    name_is("In", "n1", "n2"),                                # metadata.name takes exactly one value
    {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]},
    # the scheduler matches fields against metadata.name only: another key reads "", not the node's name
    {"matchFields": [{"key": "spec.nodeName", "operator": "In", "values": ["n1"]}]},
    {"matchFields": [{"key": "name", "operator": "In", "values": ["n1"]}]},
])
def test_terms_the_scheduler_cannot_use_select_no_node(term):
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r")), [selected("s", [dev("far-0")], term)], CLASSES, node="n1")


def test_per_device_node_selection_reads_each_devices_selector():
    s = slice_("s", [], node=None, pool="p")
    del s["spec"]["allNodes"]
    s["spec"]["perDeviceNodeSelection"] = True
    s["spec"]["devices"] = [{**dev("d0"), "nodeSelector": {"nodeSelectorTerms": [name_is("In", "n2")]}},
                            {**dev("d1"), "nodeSelector": {"nodeSelectorTerms": [name_is("In", "n1")]}}]
    assert devices_of(allocate(claim("c", exactly("r")), [s], CLASSES, node="n1")) == [("r", "p", "d1")]


def test_a_selector_decoded_from_json_selects_by_its_operators_value():
    # Slices come from the API server's JSON (or a file), so the operator is a string the decoder built, not
    # the literal "In" of this module: the scheduler's In must be recognised by value.
    decoded = json.loads(json.dumps(selected("s2", [dev("far-0")], name_is("In", "n1"))))
    assert decoded["spec"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["operator"] is not "In"  # noqa: F632
    out = allocate(claim("c", exactly("g")), [decoded], CLASSES, node="n1")
    assert devices_of(out) == [("g", "far", "far-0")]
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("g")), [decoded], CLASSES, node="n2")
