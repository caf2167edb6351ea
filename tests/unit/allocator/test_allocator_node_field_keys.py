"""A node selector's matchFields requirement on a key other than `metadata.name` reads "" (the scheduler
matches fields against the node's name only), whether the key sorts before or after `metadata.name`: `In`
the node's name selects no node, `NotIn` it selects every node."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, slice_

from driver.allocator import Unallocatable, allocate


def selected(key, op):
    s = slice_("far", [dev("far-0")], node=None, pool="far")
    del s["spec"]["allNodes"]
    s["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": key, "operator": op, "values": ["n1"]}]}]}
    return s


@pytest.mark.parametrize("key", ["metadata.labels", "a", "metadata.namespace", "spec.name"])
def test_another_field_key_reads_empty(key):
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r")), [selected(key, "In")], CLASSES, node="n1")
    out = allocate(claim("c", exactly("r")), [selected(key, "NotIn")], CLASSES, node="n1")
    assert devices_of(out) == [("r", "far", "far-0")]
