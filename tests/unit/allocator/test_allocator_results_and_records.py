"""What an allocation result carries and what recorded allocations hold, as the scheduler's counterpart
(`carve allocate`, the controller) sees them: binding conditions, a node selector for a device that binds
to its node, class configuration shared by requests of one class, a claim without requests, a claim
recorded twice, and a pool its recorded claims already oversubscribe."""

from __future__ import annotations

import pytest
from allocator_fixtures import CLASSES, DRIVER, claim, dev, devices_of, exactly, klass, slice_

from driver.allocator import cel
from driver.allocator.allocator import Allocator, Unallocatable, allocate


def test_a_device_with_binding_conditions_passes_them_on_and_binds_the_claim_to_the_node():
    gated = dict(dev("g0"), bindingConditions=["ready"], bindingFailureConditions=["failed"],
                 bindsToNode=True)
    slices = [slice_("a", [gated], node=None)]
    out = allocate(claim("c", exactly("r")), slices, CLASSES, (), "n7")
    (r,) = out["devices"]["results"]
    assert r["bindingConditions"] == ["ready"] and r["bindingFailureConditions"] == ["failed"]
    assert out["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n7"]}]}]}
    plain = allocate(claim("c", exactly("r")), [slice_("a", [dev("g0")], node=None)], CLASSES, (), "n7")
    assert "bindingConditions" not in plain["devices"]["results"][0] and "nodeSelector" not in plain


def test_requests_of_one_class_share_its_configuration_entry():
    config = [{"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}]
    classes = [klass("gpu", config=config), klass("mig")]
    slices = [slice_("a", [dev("g0"), dev("g1"), dev("m0", "mig")])]
    c = claim("c", exactly("r"), exactly("s"), exactly("t", cls="mig"))
    out = allocate(c, slices, classes)
    assert out["devices"]["config"] == [
        {"source": "FromClass", "requests": ["r", "s"], "opaque": {"driver": DRIVER, "parameters": {"a": 1}}}]
    every = allocate(claim("c", exactly("r"), exactly("s")), slices, classes)
    assert every["devices"]["config"] == [{"source": "FromClass", "opaque": {"driver": DRIVER,
                                                                            "parameters": {"a": 1}}}]


def test_a_claim_without_requests_gets_an_empty_allocation():
    out = Allocator([slice_("a", [dev("g0")])], CLASSES).allocate(claim("c"))
    assert out == {"devices": {"results": [], "config": []}}


def test_a_claim_recorded_twice_holds_only_its_latest_allocation():
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    a = Allocator(slices, CLASSES)
    c = claim("c", exactly("r"), uid="u1")
    first = a.allocate(c)
    a.add_allocated({**c, "status": {"allocation": first}})
    moved = {"devices": {"results": [dict(first["devices"]["results"][0], device="g1")], "config": []}}
    a.add_allocated({**c, "status": {"allocation": moved}})
    assert devices_of(a.allocate(claim("d", exactly("r"), uid="u2"))) == [("r", "n1", "g0")]


COUNTERS = [{"name": "gpu-0", "counters": {"slices": {"value": "4"}}},
            {"name": "gpu-1", "counters": {"slices": {"value": "4"}}}]


def _mig(name, counter_set, value="3"):
    return dev(name, "mig", consumes=[{"counterSet": counter_set, "counters": {"slices": {"value": value}}}])


def _held(name, device, uid):
    return {**claim(name, exactly("r", cls="mig"), uid=uid), "status": {"allocation": {"devices": {
        "results": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": device}], "config": []}}}}


def test_a_pool_its_recorded_claims_oversubscribe_takes_no_more_counter_devices_until_they_go():
    # Two recorded claims hold 6 of gpu-0's 4 slices (the slice changed under them): the scheduler checks
    # every set of such a pool, so even gpu-1's device is refused until one of them goes.
    slices = [slice_("a", [_mig("m0", "gpu-0"), _mig("m1", "gpu-0"), _mig("m2", "gpu-1", "1")],
                     counters=COUNTERS)]
    a = Allocator(slices, CLASSES)
    a.add_allocated(_held("h0", "m0", "u0"))
    a.add_allocated(_held("h1", "m1", "u1"))
    assert a.ledger.oversubscribed == {(DRIVER, "n1")}
    with pytest.raises(Unallocatable):
        a.allocate(claim("c", exactly("r", cls="mig"), uid="u2"))
    a.remove_allocated("u1")
    assert a.ledger.oversubscribed == set()
    assert devices_of(a.allocate(claim("c", exactly("r", cls="mig"), uid="u2"))) == [("r", "n1", "m2")]


@pytest.mark.parametrize("expression", ["", "   ", None])
def test_an_empty_selector_is_refused(expression):
    with pytest.raises(cel.CelError, match="CEL expression is empty"):
        cel.compile_selector(expression)


def test_a_selector_past_10_kib_is_refused_saying_its_length():
    long = "true || " * 1300 + "true"
    with pytest.raises(cel.CelError, match=f"CEL expression is {len(long)} characters long, more than"):
        cel.compile_selector(long)


def _shared_mig(name, counter_set="gpu-0"):
    return dict(_mig(name, counter_set, "4"), allowMultipleAllocations=True,
                capacity={"memory": {"value": "8Gi"}})


def test_a_shared_devices_counters_are_held_while_any_share_is_and_freed_with_the_last():
    # s0 (shared) and x0 (whole) both take all 4 of gpu-0's slices: x0 fits only while s0 has no share
    slices = [slice_("a", [_shared_mig("s0"), _mig("x0", "gpu-0", "4")], counters=COUNTERS)]
    a = Allocator(slices, CLASSES)
    records = []
    for uid in ("u1", "u2"):
        c = claim(f"c{uid}", exactly("r", cls="mig", capacity={"memory": "1Gi"}), uid=uid)
        out = a.allocate(c)
        assert devices_of(out) == [("r", "n1", "s0")]
        a.add_allocated({**c, "status": {"allocation": out}})
        records.append(uid)
    whole = claim("whole", exactly("r", cls="mig", selectors=[f'device.attributes["{DRIVER}"].uuid == "x0"']),
                  uid="u9")
    with pytest.raises(Unallocatable):
        a.allocate(whole)
    a.remove_allocated("u1")
    with pytest.raises(Unallocatable):
        a.allocate(whole)  # one share left: its counters still held
    a.remove_allocated("u2")
    assert devices_of(a.allocate(whole)) == [("r", "n1", "x0")]
    assert a.ledger.counters[(DRIVER, "n1")] == {"gpu-0": {"slices": 0}}
