"""A malformed pending claim fails that claim only: the planning round goes on for the others, and the
problem names the claim and the field."""

from __future__ import annotations

import copy

import pytest
from support.partitioning import NOW, claim, mig, node_slices

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.controller.inputs import build_input
from driver.controller.planner import Planner
from driver.simulate.cluster import device_classes


def broken(spec_change) -> dict:
    c = claim(mig("3g.40gb"), name="broken")
    spec_change(c["spec"]["devices"])
    return c


CASES = {
    "requests-a-string": (lambda d: d.update(requests="x"),
                          "ResourceClaim ns/broken: spec.devices.requests: expected a list, got str 'x'"),
    "match-attribute-an-int": (
        lambda d: d.update(constraints=[{"matchAttribute": 5}]),
        "ResourceClaim ns/broken: spec.devices.constraints[0].matchAttribute: expected a qualified attribute "
        "name, got int 5"),
    "request-an-int": (lambda d: d.update(requests=[5]),
                       "ResourceClaim ns/broken: spec.devices.requests[0]: expected an object, got int 5"),
    "count-a-string": (lambda d: d["requests"][0]["exactly"].update(count="two"),
                       "ResourceClaim ns/broken: request g: count: expected an integer, got str 'two'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_claim_is_a_problem_and_the_round_still_plans_the_others(case):
    change, message = CASES[case]
    good = claim(mig("3g.40gb"), name="good")
    invalid: list = []
    inp, problems = build_input(node_slices("n1", "1xA100-80GB", "soft"), device_classes(),
                                [broken(change), copy.deepcopy(good)], {}, PartitioningPolicySpec(), NOW,
                                invalid=invalid)
    assert problems == [message]
    assert [(c["metadata"]["name"], m) for c, m in invalid] == [("broken", message)]
    assert [p.key for p in inp.pending] == ["ns/good"]
    plan = Planner().plan(inp)
    assert [(c.node, c.to_strategy, c.claims) for c in plan.changes] == [("n1", "mig", ("ns/good",))]

