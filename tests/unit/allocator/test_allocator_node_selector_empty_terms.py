"""A node selector term without any requirement selects no node (v1.NodeSelectorTerm: "A null or empty node
selector term matches no objects"), even beside a term that would: terms are ORed, an empty one adds none."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, slice_

from driver.allocator import Unallocatable, allocate

NAME_IS_N1 = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}


def selected(devices, *terms):
    s = slice_("far", devices, node=None, pool="far")
    del s["spec"]["allNodes"]
    s["spec"]["nodeSelector"] = {"nodeSelectorTerms": list(terms)}
    return s


@pytest.mark.parametrize("empty", [{"matchFields": []}, {"matchExpressions": []},
                                   {"matchFields": [], "matchExpressions": []}],
                         ids=["no-fields", "no-expressions", "neither"])
def test_a_term_without_requirements_serves_no_node(empty):
    for node in ("n1", None):
        with pytest.raises(Unallocatable):
            allocate(claim("c", exactly("r")), [selected([dev("far-0")], empty)], CLASSES, node=node)
    beside = selected([dev("far-0")], empty, NAME_IS_N1)
    out = allocate(claim("c", exactly("r")), [beside], CLASSES, node="n1")
    assert devices_of(out) == [("r", "far", "far-0")]
