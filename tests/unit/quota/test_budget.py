"""Namespace GPU budgets (driver/quota): labels parsed, what each claim charges, the sum, the decision and its
message, the template rule, the ledger of claims admitted but not yet listed, and the metrics."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from driver import names
from driver.quota.budget import (
    BudgetError,
    budget_rows,
    claim_charges,
    decide,
    namespace_usage,
    parse_budget,
    total,
)
from driver.quota.webhook import BudgetCheck, Ledger

GI, MI = 1 << 30, 1 << 20


def ns(name: str = "team-a", **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": {f"budget.gpu.carve.dev/{k}": v for k, v in labels.items()}}}


def share(
    memory: str | None = "4Gi", cores: str | None = None, cls: str = names.CLASS_VGPU, count=None
) -> dict:
    requests = {}
    if memory is not None:
        requests["memory"] = memory
    if cores is not None:
        requests["cores"] = cores
    exactly: dict = {"deviceClassName": cls, "capacity": {"requests": requests}}
    if count is not None:
        exactly["count"] = count
    return {"name": "gpu", "exactly": exactly}


def claim(name: str, *requests: dict, namespace: str = "team-a") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": list(requests)}},
    }


def test_budget_labels_parse_to_bytes_and_percent():
    b = parse_budget(ns(memory="40Gi", cores="250"))
    assert b.limits == {"memory": 40 * GI, "cores": 250}
    assert not parse_budget(ns())


@pytest.mark.parametrize(("label", "value"), [("memory", "lots"), ("cores", "-5")])
def test_a_bad_budget_label_names_namespace_and_label(label, value):
    with pytest.raises(BudgetError, match=f"namespace team-a: label budget.gpu.carve.dev/{label}: '{value}'"):
        parse_budget(ns(**{label: value}))


def test_a_share_charges_count_times_memory_and_cores():
    (c,) = claim_charges(claim("a", share("4Gi", "30", count=2))["spec"])
    assert c.amounts == {"memory": 8 * GI, "cores": 60}
    assert c.field == "spec.devices.requests[0].exactly" and c.device_class == names.CLASS_VGPU


def test_memory_is_charged_in_whole_steps_as_the_scheduler_consumes_it():
    """100Mi asks consume 256Mi each: charging as written would let 100 tiny claims past a 10Gi budget."""
    (c,) = claim_charges(claim("a", share("100Mi"))["spec"])
    assert c.amounts["memory"] == 256 * MI


def test_whole_gpus_and_mig_do_not_count_only_soft_and_mps():
    spec = claim(
        "a",
        {"name": "w", "exactly": {"deviceClassName": names.CLASS_GPU}},
        {"name": "m", "exactly": {"deviceClassName": names.CLASS_MIG}},
        share("2Gi", cls=names.CLASS_MPS),
    )["spec"]
    charges = claim_charges(spec)
    assert [c.device_class for c in charges] == [names.CLASS_MPS]
    assert total(charges)["memory"] == 2 * GI


def test_first_available_charges_its_costliest_alternative():
    req = {
        "name": "gpu",
        "firstAvailable": [
            {
                "name": "big",
                "deviceClassName": names.CLASS_VGPU,
                "capacity": {"requests": {"memory": "40Gi"}},
            },
            {
                "name": "small",
                "deviceClassName": names.CLASS_VGPU,
                "capacity": {"requests": {"memory": "8Gi", "cores": "50"}},
            },
        ],
    }
    (c,) = claim_charges(claim("a", req)["spec"])
    assert c.amounts == {"memory": 40 * GI, "cores": 50}
    assert c.field.endswith("firstAvailable[0]")


def test_a_share_without_memory_is_refused_only_where_memory_is_budgeted():
    spec = claim("a", share(None, "20"))["spec"]
    missing = r"spec.devices.requests\[0\].exactly.capacity.requests.memory: missing"
    with pytest.raises(BudgetError, match=missing):
        claim_charges(spec, ("memory",))
    (c,) = claim_charges(spec, ("cores",))
    assert c.amounts == {"memory": 0, "cores": 20}


def test_allocation_mode_all_cannot_be_budgeted():
    req = share()
    req["exactly"]["allocationMode"] = "All"
    with pytest.raises(BudgetError, match="allocationMode: 'All'"):
        claim_charges(claim("a", req)["spec"])


def test_refusal_names_namespace_class_request_used_and_remaining():
    budget = parse_budget(ns(memory="10Gi"))
    usage = namespace_usage([claim("a", share("4Gi")), claim("b", share("4Gi"))])
    charges = claim_charges(claim("c", share("3Gi"))["spec"])
    d = decide(budget, "ResourceClaim", "c", charges, usage)
    assert not d.allowed and d.resource == "memory"
    assert d.message == (
        "namespace team-a: GPU memory budget exceeded: ResourceClaim c asks 3Gi (vgpu.carve.dev 1 x 3Gi at "
        "spec.devices.requests[0].exactly); 8Gi of 10Gi is in use by 2 claim(s), 2Gi remains "
        "(label budget.gpu.carve.dev/memory=10Gi)"
    )
    fits = claim_charges(claim("c", share("2Gi"))["spec"])
    assert decide(budget, "ResourceClaim", "c", fits, usage).allowed


def test_cores_budget_is_checked_on_its_own():
    budget = parse_budget(ns(cores="100"))
    usage = namespace_usage([claim("a", share("1Gi", "80"))])
    d = decide(budget, "ResourceClaim", "b", claim_charges(claim("b", share("1Gi", "30"))["spec"]), usage)
    assert not d.allowed and "GPU cores budget exceeded" in d.message and "20% remains" in d.message


def test_claims_the_budget_cannot_read_count_zero_and_are_listed():
    usage = namespace_usage([claim("old", share(None)), claim("a", share("1Gi"))])
    assert usage.used["memory"] == 1 * GI and usage.unreadable == ()  # lenient: missing memory is 0
    bad = claim("bad", {"name": "gpu", "exactly": {"deviceClassName": names.CLASS_VGPU, "count": -1}})
    assert namespace_usage([bad]).unreadable == ("bad",)


@given(st.lists(st.integers(min_value=1, max_value=64), max_size=12), st.integers(min_value=0, max_value=400))
def test_admitting_in_turn_never_exceeds_the_budget(asks_gi, limit_gi):
    """Whatever order and sizes claims come in, what is admitted sums to at most the budget."""
    budget = parse_budget(ns(memory=f"{limit_gi}Gi"))
    admitted: list[dict] = []
    for i, gi in enumerate(asks_gi):
        c = claim(f"c{i}", share(f"{gi}Gi"))
        usage = namespace_usage(admitted)
        if decide(budget, "ResourceClaim", f"c{i}", claim_charges(c["spec"]), usage).allowed:
            admitted.append(c)
    assert namespace_usage(admitted).used["memory"] <= limit_gi * GI


def review(name: str, *requests: dict, kind: str = "resourceclaims", dry_run: bool = False) -> dict:
    obj = claim(name, *requests)
    if kind == "resourceclaimtemplates":
        obj = {"metadata": {"name": name}, "spec": {"spec": obj["spec"]}}
    return {
        "operation": "CREATE",
        "namespace": "team-a",
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": kind},
        "object": obj,
        "dryRun": dry_run,
    }


def check_for(claims: list[dict], namespace: dict, registry=None, clock=None) -> BudgetCheck:
    return BudgetCheck(
        claims=lambda: claims,
        namespace=lambda n: namespace if n == namespace["metadata"]["name"] else None,
        namespaces=lambda: [namespace],
        ledger=Ledger(clock=clock) if clock else None,
        registry=registry,
    )


def test_claims_admitted_back_to_back_both_count_before_the_informer_lists_them():
    check = check_for([], ns(memory="10Gi"))
    assert check.review(review("a", share("6Gi"))).allowed
    second = check.review(review("b", share("6Gi")))
    assert not second.allowed and "6Gi of 10Gi is in use by 1 claim(s)" in second.message


def test_one_claim_sent_to_both_budget_webhooks_is_charged_once():
    """The API server calls the memory and the cores webhook for the same claim: the first call's ledger
    entry must not count against the second (found by the 1.37 e2e: a 3Gi claim refused at 3Gi of 4Gi)."""
    check = check_for([], ns(memory="4Gi", cores="50"))
    assert check.review(review("a", share("3Gi", "30"))).allowed
    assert check.review(review("a", share("3Gi", "30"))).allowed


def test_dry_runs_hold_nothing_and_the_ledger_forgets_what_the_informer_shows():
    now = [0.0]
    listed: list[dict] = []
    check = BudgetCheck(
        claims=lambda: listed,
        namespace=lambda n: ns(memory="10Gi"),
        namespaces=lambda: [ns(memory="10Gi")],
        ledger=Ledger(hold_s=10, clock=lambda: now[0]),
    )
    assert check.review(review("a", share("6Gi"), dry_run=True)).allowed
    assert check.review(review("b", share("6Gi"))).allowed
    listed.append(claim("b", share("6Gi")))  # the informer shows b: counted once, not twice
    assert check.review(review("c", share("4Gi"))).allowed
    now[0] = 11.0  # c was never listed (refused further down the chain): forgotten after hold_s
    assert check.review(review("d", share("4Gi"))).allowed


def test_a_template_is_refused_only_when_one_claim_from_it_is_over_the_whole_budget():
    check = check_for([claim("a", share("8Gi"))], ns(memory="10Gi"))
    assert check.review(review("t", share("6Gi"), kind="resourceclaimtemplates")).allowed
    d = check.review(review("t", share("12Gi"), kind="resourceclaimtemplates"))
    assert not d.allowed
    assert (
        "ResourceClaimTemplate t asks 12Gi per claim, over the namespace's whole budget of 10Gi" in d.message
    )


def test_unbudgeted_namespaces_and_other_operations_pass():
    check = check_for([], ns())
    assert check.review(review("a", share("600Gi"))).allowed
    update = {**review("a", share("600Gi")), "operation": "UPDATE"}
    assert check_for([], ns(memory="1Gi")).review(update).allowed


def test_a_review_checks_every_budget_of_the_namespace_or_only_those_asked():
    check = check_for([claim("a", share("9Gi", "90"))], ns(memory="10Gi", cores="100"))
    big = review("b", share("4Gi", "5"))
    assert not check.review(big).allowed
    assert not check.review(big, ("memory",)).allowed
    assert check.review(big, ("cores",)).allowed


def test_metrics_show_each_budgeted_namespace_and_count_denials():
    registry = CollectorRegistry()
    check = check_for([claim("a", share("4Gi", "30"))], ns(memory="10Gi", cores="100"), registry)
    assert not check.review(review("b", share("8Gi"))).allowed
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    team = (("namespace", "team-a"),)
    assert samples[("carve_namespace_memory_budget_bytes", team)] == 10 * GI
    assert samples[("carve_namespace_memory_requested_bytes", team)] == 4 * GI
    assert samples[("carve_namespace_cores_budget_percent", team)] == 100
    assert samples[("carve_namespace_cores_requested_percent", team)] == 30
    assert samples[("carve_namespace_budget_denials_total", (*team, ("resource", "memory")))] == 1


def test_budget_rows_leave_out_unbudgeted_and_unreadable_namespaces():
    rows = budget_rows(
        [ns("a", memory="1Gi"), ns("b"), ns("c", memory="x")],
        [claim("x", share("512Mi"), namespace="a"), claim("y", share("8Gi"), namespace="b")],
    )
    got = [(r.namespace, r.resource, r.used, r.limit) for r in rows]
    assert got == [("a", "memory", Fraction(512 * MI), GI)]


def test_an_allocated_claim_counts_what_it_consumed_even_without_a_memory_request():
    c = claim("old", share(None))  # made before the namespace had a budget: the device's default was taken
    c["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "device": "gpu-1", "consumedCapacity": {"memory": "8Gi", "cores": "0"}}
                ]
            }
        }
    }
    usage = namespace_usage([c, claim("new", share("1Gi"))])
    assert usage.used["memory"] == 9 * GI and usage.claims == 2
