"""A ClaimPlan is a value: what is prepared (the claim's reference and devices), not the copy of the claim it
was planned from. Two reads of one claim (another resourceVersion, a status written in between) plan the
same thing, and a plan can key a set or a dict, which a dict-valued field compared would forbid."""

from __future__ import annotations

from driver.plugin.claims.plan import ClaimPlan, ClaimRef


def test_plans_of_two_reads_of_one_claim_are_equal_and_hash_alike():
    ref = ClaimRef("ns", "c", "uid-1")
    first = ClaimPlan(ref, (), claim={"metadata": {"uid": "uid-1", "resourceVersion": "1"}})
    again = ClaimPlan(ref, (), claim={"metadata": {"uid": "uid-1", "resourceVersion": "7"}, "status": {}})
    assert first == again
    assert {first, again} == {first}
    assert "resourceVersion" not in repr(first)  # the claim (a tenant's parameters) stays out of logs
