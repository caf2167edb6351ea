"""One test per allocation rule, with outcomes worked out from the documented semantics."""

import json

import pytest
from allocator_fixtures import CLASSES, claim, dev, devices_of, exactly, klass, slice_

from driver.allocator import Allocator, Unallocatable, allocate


def test_first_fit_takes_devices_in_pool_slice_position_order():
    slices = [slice_("n1-b", [dev("g2")], count=2), slice_("n1-a", [dev("g1"), dev("g0")], count=2)]
    out = allocate(claim("c", exactly("r", count=2)), slices, CLASSES)
    assert devices_of(out) == [("r", "n1", "g1"), ("r", "n1", "g0")]


def test_only_the_newest_pool_generation_counts():
    slices = [slice_("old", [dev("g-old")], generation=1), slice_("new", [dev("g-new")], generation=2)]
    assert devices_of(allocate(claim("c", exactly("r")), slices, CLASSES)) == [("r", "n1", "g-new")]


def test_incomplete_pool_is_skipped():
    slices = [slice_("a", [dev("g0")], count=2), slice_("b", [dev("h0")], node="n1", pool="other")]
    out = allocate(claim("c", exactly("r")), slices, CLASSES)
    assert devices_of(out) == [("r", "other", "h0")]


def test_all_mode_fails_on_incomplete_pool():
    slices = [slice_("a", [dev("g0")], count=2)]
    with pytest.raises(Unallocatable, match="incomplete"):
        allocate(claim("c", exactly("r", mode="All")), slices, CLASSES)


def test_all_mode_takes_every_matching_device():
    slices = [slice_("a", [dev("g0"), dev("v0", "vgpu"), dev("g1")])]
    assert [d for _, _, d in devices_of(allocate(claim("c", exactly("r", mode="All")), slices, CLASSES))] \
        == ["g0", "g1"]


def test_all_mode_fails_when_a_matching_device_is_in_use():
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    a = Allocator(slices, CLASSES)
    first = claim("first", exactly("r"))
    a.add_allocated({**first, "status": {"allocation": a.allocate(first)}})
    with pytest.raises(Unallocatable):
        a.allocate(claim("c", exactly("r", mode="All")))


def test_exact_count_fails_with_too_few_devices_and_says_so():
    slices = [slice_("a", [dev("g0"), dev("v0", "vgpu")])]
    with pytest.raises(Unallocatable, match="request r needs 2 devices: 1 of 2 devices match class gpu"):
        allocate(claim("c", exactly("r", count=2)), slices, CLASSES)


def test_request_selectors_apply_after_class_selectors():
    slices = [slice_("a", [dev("g0", index=0), dev("g1", index=1)])]
    out = allocate(claim("c", exactly("r", selectors=['device.attributes["gpu.carve.dev"].index == 1'])),
                   slices, CLASSES)
    assert devices_of(out) == [("r", "n1", "g1")]


def test_missing_device_class_is_unallocatable():
    with pytest.raises(Unallocatable, match="DeviceClass nope not found"):
        allocate(claim("c", exactly("r", cls="nope")), [slice_("a", [dev("g0")])], CLASSES)


def test_cel_runtime_error_fails_the_claim_naming_the_expression():
    slices = [slice_("a", [dev("g0")])]
    with pytest.raises(Unallocatable, match="profile"):
        allocate(claim("c", exactly("r", selectors=['device.attributes["gpu.carve.dev"].profile == "x"'])),
                 slices, CLASSES)


def test_allocated_exclusive_device_is_not_given_twice():
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    a = Allocator(slices, CLASSES)
    for name in ("c1", "c2"):
        c = claim(name, exactly("r"))
        a.add_allocated({**c, "status": {"allocation": a.allocate(c)}})
    assert {d for uid in a._claims for d in [k for k, _, _ in a._claims[uid]]} == {
        ("gpu.carve.dev", "n1", "g0"), ("gpu.carve.dev", "n1", "g1")}
    with pytest.raises(Unallocatable, match="in use"):
        a.allocate(claim("c3", exactly("r")))


def test_remove_allocated_frees_the_device():
    slices = [slice_("a", [dev("g0")])]
    a = Allocator(slices, CLASSES)
    c = claim("c1", exactly("r"), uid="uid-1")
    a.add_allocated({**c, "status": {"allocation": a.allocate(c)}})
    a.remove_allocated("uid-1")
    assert devices_of(a.allocate(claim("c2", exactly("r")))) == [("r", "n1", "g0")]


def test_first_available_takes_the_first_subrequest_that_fits():
    slices = [slice_("a", [dev("v0", "vgpu")])]
    req = {"name": "r", "firstAvailable": [{"name": "mig", "deviceClassName": "mig"},
                                           {"name": "soft", "deviceClassName": "vgpu"}]}
    assert devices_of(allocate(claim("c", req), slices, CLASSES)) == [("r/soft", "n1", "v0")]


def test_match_attribute_keeps_devices_on_one_parent():
    slices = [slice_("a", [dev("s0", parentUUID="A"), dev("s1", parentUUID="B"), dev("s2", parentUUID="B")])]
    c = claim("c", exactly("r", count=2), constraints=[{"matchAttribute": "gpu.carve.dev/parentUUID"}])
    assert [d for _, _, d in devices_of(allocate(c, slices, CLASSES))] == ["s1", "s2"]


def test_distinct_attribute_spreads_devices():
    slices = [slice_("a", [dev("s0", parentUUID="A"), dev("s1", parentUUID="A"), dev("s2", parentUUID="B")])]
    c = claim("c", exactly("a"), exactly("b"),
              constraints=[{"distinctAttribute": "gpu.carve.dev/parentUUID"}])
    assert [d for _, _, d in devices_of(allocate(c, slices, CLASSES))] == ["s0", "s2"]


def test_constraint_failure_is_explained():
    slices = [slice_("a", [dev("s0", parentUUID="A"), dev("s1", parentUUID="B")])]
    c = claim("c", exactly("r", count=2), constraints=[{"matchAttribute": "gpu.carve.dev/parentUUID"}])
    with pytest.raises(Unallocatable, match=r"constraints \(matchAttribute gpu\.carve\.dev/parentUUID\)"):
        allocate(c, slices, CLASSES)


SOFT_POLICY = {"default": "1Gi", "validRange": {"min": "256Mi", "max": "8Gi", "step": "256Mi"}}


def test_consumable_capacity_rounds_up_to_the_step():
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True, policy=SOFT_POLICY)])]
    out = allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": "1000Mi"})), slices, CLASSES)
    assert out["devices"]["results"][0]["consumedCapacity"] == {"memory": "1Gi"}


def test_consumable_capacity_uses_default_when_not_requested():
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True, policy=SOFT_POLICY)])]
    out = allocate(claim("c", exactly("r", cls="vgpu")), slices, CLASSES)
    assert out["devices"]["results"][0]["consumedCapacity"] == {"memory": "1Gi"}


def test_consumable_capacity_without_policy_takes_the_whole_value():
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True)])]
    a = Allocator(slices, CLASSES)
    c = claim("c", exactly("r", cls="vgpu"))
    out = a.allocate(c)
    assert out["devices"]["results"][0]["consumedCapacity"] == {"memory": "8Gi"}
    a.add_allocated({**c, "status": {"allocation": out}})
    with pytest.raises(Unallocatable, match="memory 8Gi requested, 0 left"):
        a.allocate(claim("c2", exactly("r", cls="vgpu")))


def test_valid_values_round_up_to_the_next_value():
    policy = {"validValues": ["1Gi", "4Gi", "8Gi"]}
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True, policy=policy)])]
    out = allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": "2Gi"})), slices, CLASSES)
    assert out["devices"]["results"][0]["consumedCapacity"] == {"memory": "4Gi"}


def test_valid_values_take_a_request_equal_to_a_value_as_is():
    policy = {"validValues": ["1Gi", "4Gi", "8Gi"]}
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True, policy=policy)])]
    out = allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": "4Gi"})), slices, CLASSES)
    assert out["devices"]["results"][0]["consumedCapacity"] == {"memory": "4Gi"}


def test_request_above_policy_max_does_not_fit():
    slices = [slice_("a", [dev("v0", "vgpu", memory="16Gi", multi=True, policy=SOFT_POLICY)])]
    with pytest.raises(Unallocatable, match=r"memory 9Gi: must be 256Mi..8Gi in steps of 256Mi"):
        allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": "9Gi"})), slices, CLASSES)


def test_shares_add_up_to_the_capacity_and_no_further():
    slices = [slice_("a", [dev("v0", "vgpu", memory="2Gi", multi=True, policy=SOFT_POLICY)])]
    a = Allocator(slices, CLASSES)
    shares = set()
    for i in range(2):
        c = claim(f"c{i}", exactly("r", cls="vgpu"))
        out = a.allocate(c)
        shares.add(out["devices"]["results"][0]["shareID"])
        a.add_allocated({**c, "status": {"allocation": out}})
    assert len(shares) == 2
    with pytest.raises(Unallocatable, match="memory 1Gi requested, 0 left"):
        a.allocate(claim("c3", exactly("r", cls="vgpu")))


def test_share_id_is_deterministic_per_claim():
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True, policy=SOFT_POLICY)])]
    c = claim("c", exactly("r", cls="vgpu"), uid="u-1")
    assert allocate(c, slices, CLASSES) == allocate(c, slices, CLASSES)


def test_capacity_request_on_exclusive_device_is_a_minimum():
    slices = [slice_("a", [dev("g0", memory="40Gi"), dev("g1", memory="80Gi")])]
    out = allocate(claim("c", exactly("r", capacity={"memory": "60Gi"})), slices, CLASSES)
    assert devices_of(out) == [("r", "n1", "g1")]
    assert "consumedCapacity" not in out["devices"]["results"][0]


def test_request_for_unknown_capacity_skips_the_device():
    slices = [slice_("a", [dev("g0", memory="40Gi")])]
    with pytest.raises(Unallocatable, match="has no capacity cores"):
        allocate(claim("c", exactly("r", capacity={"cores": "10"})), slices, CLASSES)


def _mig_slices():
    counters = [{"name": "gpu-0", "counters": {"slices": {"value": "7"}}}]
    mig = [dev(f"m{i}", "mig", consumes=[{"counterSet": "gpu-0", "counters": {"slices": {"value": "3"}}}])
           for i in range(3)]
    return [slice_("a", mig, counters=counters)]


def test_counters_limit_partitionable_devices():
    a = Allocator(_mig_slices(), CLASSES)
    for i in range(2):
        c = claim(f"c{i}", exactly("r", cls="mig"))
        a.add_allocated({**c, "status": {"allocation": a.allocate(c)}})
    with pytest.raises(Unallocatable, match="counter gpu-0/slices: 3 needed, 1 left"):
        a.allocate(claim("c3", exactly("r", cls="mig")))


def test_a_shared_device_consumes_its_counters_once_however_many_shares_it_has():
    # 7 slices: the shared device takes 4 while it has any share, which leaves exactly 3 for the MIG device.
    counters = [{"name": "gpu-0", "counters": {"slices": {"value": "7"}}}]
    shared = dev("v0", "vgpu", memory="8Gi", multi=True, policy=SOFT_POLICY,
                 consumes=[{"counterSet": "gpu-0", "counters": {"slices": {"value": "4"}}}])
    mig = dev("m0", "mig", consumes=[{"counterSet": "gpu-0", "counters": {"slices": {"value": "3"}}}])
    a = Allocator([slice_("a", [shared, mig], counters=counters)], CLASSES)
    soft = [claim(f"s{i}", exactly("r", cls="vgpu")) for i in range(2)]
    for c in soft:
        a.add_allocated({**c, "status": {"allocation": a.allocate(c)}})
    m = claim("m", exactly("r", cls="mig"))
    assert devices_of(a.allocate(m)) == [("r", "n1", "m0")]


def test_counters_apply_within_one_claim():
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r", cls="mig", count=3)), _mig_slices(), CLASSES)


def test_admin_access_may_take_an_allocated_device_and_holds_nothing():
    slices = [slice_("a", [dev("g0")])]
    a = Allocator(slices, CLASSES)
    c1 = claim("c1", exactly("r"))
    a.add_allocated({**c1, "status": {"allocation": a.allocate(c1)}})
    admin = claim("admin", exactly("r", admin=True))
    out = a.allocate(admin)
    assert out["devices"]["results"][0]["adminAccess"] is True
    a.remove_allocated(next(iter(a._claims)))
    a.add_allocated({**admin, "status": {"allocation": out}})
    assert devices_of(a.allocate(claim("c2", exactly("r")))) == [("r", "n1", "g0")]


TAINT = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}


def test_tainted_device_is_skipped_unless_tolerated():
    slices = [slice_("a", [dev("g0", taints=[TAINT])])]
    with pytest.raises(Unallocatable, match="taint maintenance=true:NoSchedule is not tolerated"):
        allocate(claim("c", exactly("r")), slices, CLASSES)
    tol = [{"key": "maintenance", "operator": "Exists"}]
    out = allocate(claim("c", exactly("r", tolerations=tol)), slices, CLASSES)
    assert out["devices"]["results"][0]["tolerations"] == tol


def test_requests_are_allocated_whatever_the_order_of_their_names():
    # names are compared for equality only: "gpu" before "a" is two requests, not a repeated name
    slices = [slice_("a", [dev("g0"), dev("g1")])]
    out = allocate(claim("c", exactly("gpu"), exactly("a")), slices, CLASSES)
    assert sorted(r for r, _, _ in devices_of(out)) == ["a", "gpu"]


def test_a_toleration_without_a_key_tolerates_every_taint_only_with_exists():
    # core/v1: an empty key with operator Exists matches all keys (and values); with Equal it matches none
    slices = [slice_("a", [dev("g0", taints=[TAINT])])]
    out = allocate(claim("c", exactly("r", tolerations=[{"operator": "Exists"}])), slices, CLASSES)
    assert devices_of(out) == [("r", "n1", "g0")]
    with pytest.raises(Unallocatable, match="is not tolerated"):
        equal = [{"operator": "Equal", "value": "true"}]
        allocate(claim("c", exactly("r", tolerations=equal)), slices, CLASSES)


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_a_taint_that_keeps_pods_off_or_evicts_them_blocks_the_device(effect):
    # NoExecute (a lost GPU, the admin's opt-in) blocks new claims as NoSchedule does: it evicts the pods
    # there, so it certainly admits none.
    slices = [slice_("a", [dev("g0", taints=[{**TAINT, "effect": effect}]), dev("g1")])]
    assert devices_of(allocate(claim("c", exactly("r")), slices, CLASSES)) == [("r", "n1", "g1")]
    with pytest.raises(Unallocatable, match=f"taint maintenance=true:{effect} is not tolerated"):
        allocate(claim("c", exactly("r")), [slice_("a", [dev("g0", taints=[{**TAINT, "effect": effect}])])],
                 CLASSES)


def test_taint_with_effect_none_does_not_block():
    slices = [slice_("a", [dev("g0", taints=[{**TAINT, "effect": "None"}])])]
    assert devices_of(allocate(claim("c", exactly("r")), slices, CLASSES)) == [("r", "n1", "g0")]


def test_node_local_devices_pin_the_node():
    out = allocate(claim("c", exactly("r")), [slice_("a", [dev("g0")], node="n7")], CLASSES)
    assert out["nodeSelector"] == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n7"]}]}]}


def test_node_argument_restricts_to_that_node():
    slices = [slice_("a", [dev("g0")], node="n1"), slice_("b", [dev("g0")], node="n2")]
    assert devices_of(allocate(claim("c", exactly("r")), slices, CLASSES, node="n2")) == [("r", "n2", "g0")]
    with pytest.raises(Unallocatable, match="on node n3"):
        allocate(claim("c", exactly("r")), slices, CLASSES, node="n3")


def test_without_an_explanation_the_reason_names_the_one_node_or_counts_the_nodes():
    slices = [slice_("a", [dev("g0")], node="n1"), slice_("b", [dev("g0")], node="n2")]
    a = Allocator(slices, CLASSES)
    with pytest.raises(Unallocatable, match=r"^claim default/c does not fit on node n1$"):
        a.allocate(claim("c", exactly("r", count=2)), node="n1", explain=False)
    with pytest.raises(Unallocatable, match=r"^claim default/c does not fit on 2 nodes$"):
        a.allocate(claim("c", exactly("r", count=2)), explain=False)


def test_claim_devices_come_from_one_node():
    slices = [slice_("a", [dev("g0")], node="n1"), slice_("b", [dev("g0")], node="n2")]
    with pytest.raises(Unallocatable, match="any of 2 nodes"):
        allocate(claim("c", exactly("r", count=2)), slices, CLASSES)


def test_all_nodes_pool_serves_every_node_without_node_selector():
    out = allocate(claim("c", exactly("r")), [slice_("a", [dev("g0")], node=None)], CLASSES, node="n1")
    assert devices_of(out) == [("r", "shared", "g0")]
    assert "nodeSelector" not in out


def test_config_from_class_and_claim_filtered_to_requests():
    opaque = {"opaque": {"driver": "gpu.carve.dev", "parameters": {"x": 1}}}
    classes = [klass("gpu", config=[opaque]), klass("vgpu")]
    slices = [slice_("a", [dev("g0"), dev("v0", "vgpu")])]
    c = claim("c", exactly("a"), exactly("b", cls="vgpu"),
              config=[{"requests": ["b"], **opaque}, {"requests": ["zzz"], **opaque}, opaque])
    cfg = allocate(c, slices, classes)["devices"]["config"]
    assert cfg == [{"source": "FromClass", "requests": ["a"], **opaque},
                   {"source": "FromClaim", "requests": ["b"], **opaque},
                   {"source": "FromClaim", **opaque}]


@pytest.mark.parametrize("empty", [[], None])
def test_a_claim_config_with_no_requests_named_applies_to_all_and_is_echoed_without_them(empty):
    # the claim as read from a file or the API (keys parsed, not this module's literals): an empty or
    # null `requests` means every request, and the result carries no `requests` for it, as the API
    # omits an empty list
    opaque = {"opaque": {"driver": "gpu.carve.dev", "parameters": {"x": 1}}}
    config = json.loads(json.dumps([{"requests": empty, **opaque}]))
    cfg = allocate(claim("c", exactly("a"), config=config), [slice_("a", [dev("g0")])], CLASSES)
    assert cfg["devices"]["config"] == [{"source": "FromClaim", **opaque}]


def test_replace_slices_uses_the_new_generation():
    a = Allocator([slice_("a", [dev("g0")], generation=1)], CLASSES)
    a.replace_slices([slice_("a", [dev("g9")], generation=2)])
    assert devices_of(a.allocate(claim("c", exactly("r")))) == [("r", "n1", "g9")]


def test_any_driver_and_attributes_work():
    nic = {"name": "nic0", "attributes": {"example.com/speed": {"int": 100}}}
    s = slice_("a", [nic], driver="net.example.com")
    cls = {"metadata": {"name": "nic"}, "spec": {"selectors": [{"cel": {"expression":
           'device.driver == "net.example.com" && device.attributes["example.com"].speed >= 100'}}]}}
    out = allocate(claim("c", exactly("r", cls="nic")), [s], [cls])
    assert out["devices"]["results"][0]["driver"] == "net.example.com"


def test_all_mode_list_is_fixed_before_earlier_requests_take_capacity():
    # r0 takes 6Gi of a shared device; r1 wants every vgpu with 4Gi. The scheduler lists both devices
    # for r1 up front (against other claims' holdings only), so whichever r0 took, r1 fails on it.
    shared = [dev(f"v{i}", "vgpu", memory="8Gi", multi=True, policy=SOFT_POLICY) for i in range(2)]
    slices = [slice_("a", shared)]
    c = claim("c", exactly("r0", cls="vgpu", capacity={"memory": "6Gi"}),
              exactly("r1", cls="vgpu", mode="All", capacity={"memory": "4Gi"}))
    with pytest.raises(Unallocatable):
        allocate(c, slices, CLASSES)


@pytest.mark.parametrize(("spec", "message"), [
    ({"requests": [exactly("r"), exactly("r")]}, "request name r is used twice"),
    ({"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"},
                    "firstAvailable": [{"name": "a", "deviceClassName": "gpu"}]}]}, "both set"),
    ({"requests": [{"name": "r", "firstAvailable": [{"deviceClassName": "gpu"}]}]},
     r"firstAvailable\[0\].name is missing"),
    ({"requests": [exactly("r", mode="All", count=2)]}, "count must not be set with allocationMode All"),
    ({"requests": [exactly("r")], "constraints": [{"matchAttribute": "gpu.carve.dev/uuid",
                                                   "distinctAttribute": "gpu.carve.dev/uuid"}]},
     "exactly one of matchAttribute, distinctAttribute"),
    ({"requests": [exactly("r")],
      "constraints": [{"matchAttribute": "gpu.carve.dev/uuid", "requests": ["x"]}]},
     r"constraints\[0\].requests: x is not a request of the claim"),
])
def test_claims_the_api_server_would_reject_are_refused_naming_the_field(spec, message):
    c = claim("c")
    c["spec"]["devices"] = spec
    with pytest.raises(Unallocatable, match=message):
        allocate(c, [slice_("a", [dev("g0")])], CLASSES)


def test_a_claim_shape_that_found_no_room_is_tried_again_after_a_release():
    a = Allocator([slice_("a", [dev("g0")], node="n1")], CLASSES)
    first = claim("a", exactly("r"), uid="ua")
    a.add_allocated({**first, "status": {"allocation": a.allocate(first, node="n1")}})
    with pytest.raises(Unallocatable):
        a.allocate(claim("b", exactly("r")), node="n1")
    with pytest.raises(Unallocatable):
        a.allocate(claim("c", exactly("r")), node="n1")
    assert a.stats["searches_skipped"] == 1  # c's search was known to fail
    a.remove_allocated("ua")
    assert devices_of(a.allocate(claim("d", exactly("r")), node="n1")) == [("r", "n1", "g0")]


def test_request_policy_steps_count_from_the_range_minimum_not_from_zero():
    # min 1000, step 256: the valid amounts are 1000, 1256, 1512...; 1100 rounds up to 1256, which is
    # on a step from the minimum (and not a multiple of 256, so steps from zero would refuse it).
    policy = {"validRange": {"min": "1000", "step": "256", "max": "4000"}}
    slices = [slice_("a", [dev("v0", "vgpu", memory="4000", multi=True, policy=policy)])]
    out = allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": "1100"})), slices, CLASSES)
    assert devices_of(out) == [("r", "n1", "v0")]
    assert out["devices"]["results"][0]["consumedCapacity"] == {"memory": "1256"}


def test_a_fully_qualified_attribute_overrides_its_bare_twin_in_cached_results():
    # "b" has only the bare name; "a" has both spellings, and the later, qualified one (mig) is what
    # selectors see. The result cached for b (type gpu) must not be reused for a.
    b = dev("b")
    a = dev("a")
    a["attributes"]["gpu.carve.dev/type"] = {"string": "mig"}
    slices = [slice_("s", [b, a])]
    with pytest.raises(Unallocatable):
        allocate(claim("c", exactly("r", count=2)), slices, CLASSES)
    assert devices_of(allocate(claim("c", exactly("r", cls="mig")), slices, CLASSES)) == [("r", "n1", "a")]


@pytest.mark.parametrize("amount", ["-1Gi", "-1"])
def test_a_negative_capacity_request_is_refused_not_allocated(amount):
    # Issue 29: -1Gi was allocated as consumedCapacity -1Gi, giving memory back to the shared device.
    slices = [slice_("a", [dev("v0", "vgpu", memory="8Gi", multi=True, policy=SOFT_POLICY)])]
    with pytest.raises(Unallocatable, match=r"capacity\.requests\.memory: '-1(Gi)?' is negative"):
        allocate(claim("c", exactly("r", cls="vgpu", capacity={"memory": amount})), slices, CLASSES)
