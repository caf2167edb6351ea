"""Consumable capacity, taints and shared counters per device (driver/allocator/capacity.py), with the
scheduler's rules (KEP-5075 consumable capacity, core/v1 tolerations, KEP-4815 counters) and the words a
user reads when a device does not fit."""

from __future__ import annotations

import pytest
from support.decoded import decoded, read_claim, read_slice

from driver.allocator import capacity as c
from driver.allocator import quantity as q
from driver.allocator.model import CapacitySpec

Gi, Mi = q.units("1Gi"), q.units("1Mi")
STEPPED = CapacitySpec(8 * Gi, None, (), Gi, 6 * Gi, 256 * Mi)
VALUES = CapacitySpec(8 * Gi, None, (Gi, 4 * Gi))


@pytest.mark.parametrize(("requested", "spec", "consumed"), [
    (None, CapacitySpec(8 * Gi), 8 * Gi),  # not asked: the whole device
    (None, CapacitySpec(8 * Gi, 2 * Gi), 2 * Gi),  # or the policy's default
    (3 * Gi, CapacitySpec(8 * Gi), 3 * Gi),  # no policy: what is asked
    (100 * Mi, STEPPED, Gi),  # under the range: its minimum
    (Gi, STEPPED, Gi),
    (Gi + 1, STEPPED, Gi + 256 * Mi),  # rounded up to the next step above the minimum
    (Gi + 256 * Mi, STEPPED, Gi + 256 * Mi),
    (Gi + 257 * Mi, STEPPED, Gi + 512 * Mi),
    (3 * Gi + 5, CapacitySpec(8 * Gi, None, (), Gi), 3 * Gi + 5),  # a minimum, no step
    (2 * Gi, VALUES, 4 * Gi),  # the first valid value not below it
    (Gi, VALUES, Gi),
    (Gi - 1, VALUES, Gi),
    (5 * Gi, VALUES, 5 * Gi),  # above them all: as asked (and then refused)
    (5 * Gi, CapacitySpec(8 * Gi, None, ()), 5 * Gi),
])
def test_what_an_allocation_consumes(requested, spec, consumed):
    assert c._consumed(requested, spec) == consumed


@pytest.mark.parametrize(("amount", "spec", "violates"), [
    (3 * Gi + 1, CapacitySpec(8 * Gi), False),  # no policy
    (6 * Gi, STEPPED, False),
    (6 * Gi + 256 * Mi, STEPPED, True),  # past the maximum
    (Gi + 256 * Mi, STEPPED, False),
    (Gi + 100 * Mi, STEPPED, True),  # off the step
    (3 * Gi + 1, CapacitySpec(8 * Gi, 3 * Gi + 1, (), Gi, 6 * Gi, Gi), False),  # the default is allowed
    (3 * Gi, CapacitySpec(8 * Gi, None, (), None, None, Gi), False),  # steps from 0
    (3 * Gi + 1, CapacitySpec(8 * Gi, None, (), None, None, Gi), True),
    (7 * Gi, CapacitySpec(8 * Gi, None, (), None, 6 * Gi), True),  # only a maximum
    (6 * Gi, CapacitySpec(8 * Gi, None, (), None, 6 * Gi), False),
    (9 * Gi, CapacitySpec(8 * Gi, None, (), Gi), False),  # only a minimum
    (4 * Gi, VALUES, False),
    (2 * Gi, VALUES, True),
    (2 * Gi, CapacitySpec(8 * Gi, None, ()), False),  # a policy with no rule
])
def test_whether_an_amount_breaks_the_request_policy(amount, spec, violates):
    assert c.violates_policy(amount, spec) is violates


@pytest.mark.parametrize(("spec", "text"), [
    (VALUES, "must be one of 1Gi, 4Gi"),
    (STEPPED, "must be 1Gi..6Gi in steps of 256Mi"),
    (CapacitySpec(8 * Gi, None, (), Gi), "must be 1Gi..any"),
    (CapacitySpec(8 * Gi, None, (), None, 6 * Gi), "must be 0..6Gi"),
    (CapacitySpec(100 * 10**9, None, (), 10**9, 100 * 10**9, 10**9, "DecimalSI"),
     "must be 1..100 in steps of 1"),
])
def test_a_request_policy_is_worded_in_the_capacitys_format(spec, text):
    assert c.allowed_by_policy(spec) == text


def _device(**capacity):
    raw = {"name": "g0", "capacity": capacity, "allowMultipleAllocations": True,
           "taints": [{"key": "a", "value": "1", "effect": "PreferNoSchedule"},
                      {"key": "b", "value": "2", "effect": "NoSchedule"}]}
    return read_slice({"metadata": {"name": "s"}, "spec": {
        "driver": "d", "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        "devices": [raw]}}).devices[0]


def test_the_shortfall_says_which_capacity_and_how_much_is_left():
    dev = _device(memory={"value": "8Gi", "requestPolicy": {"validRange": {"min": "1Gi", "step": "1Gi"}}},
                  cores={"value": "100"})
    assert c.capacity_shortfall(dev, {"memory": 2 * Gi, "cores": 50 * 10**9}, None) == ""
    assert c.capacity_shortfall(dev, {"memory": 2 * Gi}, {"memory": 6 * Gi}) == ""  # exactly full
    assert c.capacity_shortfall(dev, {"memory": 3 * Gi}, {"memory": 6 * Gi}) == \
        "memory 3Gi requested, 2Gi left"
    assert c.capacity_shortfall(dev, {"memory": Gi}, {"memory": 9 * Gi}) == "memory 1Gi requested, 0 left"
    assert c.capacity_shortfall(dev, {"cores": 60 * 10**9}, {"cores": 50 * 10**9}) == \
        "cores 60 requested, 50 left"
    assert c.capacity_shortfall(dev, {"memory": Gi + Mi}, None) == \
        "memory 1025Mi: must be 1Gi..any in steps of 1Gi (the device's request policy)"
    assert c.format_consumed(dev, {"memory": 2 * Gi, "cores": 5 * 10**8}) == \
        {"memory": "2Gi", "cores": "500m"}


def test_consumption_names_every_capacity_and_refuses_one_the_device_lacks():
    dev = _device(memory={"value": "8Gi"}, cores={"value": "100"})

    def request(**caps):
        claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
            {"name": "r", "exactly": {"deviceClassName": "x", "capacity": {"requests": caps}}}]}}}
        return read_claim(claim).requests[0][0]

    assert c.consumption(request(memory="2Gi"), dev) == {"memory": 2 * Gi, "cores": 100 * 10**9}
    assert c.consumption(request(memory="2Gi"), dev) == {"memory": 2 * Gi, "cores": 100 * 10**9}  # memoised
    assert c.consumption(request(bandwidth="1"), dev) is None
    assert c.consumption(request(bandwidth="1"), dev) is None
    assert c.consumption(request(), dev) == {"memory": 8 * Gi, "cores": 100 * 10**9}


@pytest.mark.parametrize(("toleration", "taint", "tolerated"), [
    ({"operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),  # tolerates all
    ({}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),  # no key, Equal: nothing
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Exists"}, {"key": "j", "value": "v", "effect": "NoSchedule"}, False),
    ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ({"key": "k", "value": "a"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),  # values are
    ({"key": "k"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),  # compared for equality only
    ({"key": "k", "value": "v"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"key": "k"}, {"key": "k", "effect": "NoSchedule"}, True),  # no value on either side
    ({"key": "k", "value": "v", "effect": "NoExecute"}, {"key": "k", "value": "v", "effect": "NoSchedule"},
     False),
    ({"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"},
     True),
    ({"operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
])
def test_a_toleration_matches_a_taint_as_in_core_v1(toleration, taint, tolerated):
    assert c.tolerates(decoded(toleration), decoded(taint)) is tolerated


def test_only_a_no_schedule_or_no_execute_taint_blocks_and_the_first_untolerated_is_named():
    dev = _device()

    def request(*tolerations):
        claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
            {"name": "r", "exactly": {"deviceClassName": "x", "tolerations": list(tolerations)}}]}}}
        return read_claim(claim).requests[0][0]

    assert c.blocking_taint(dev, request()) == {"key": "b", "value": "2", "effect": "NoSchedule"}
    assert c.blocking_taint(dev, request({"key": "b", "value": "2"})) is None
    assert c.blocking_taint(dev, request({"key": "a", "operator": "Exists"})) is not None


SETS = {"gpu-0": {"slices": 7 * 10**9, "memory": 40 * Gi}, "gpu-1": {"slices": 7 * 10**9}}


@pytest.mark.parametrize(("used", "extra", "every", "only_touched"), [
    ({}, {"gpu-0": {"slices": 7 * 10**9}}, "", ""),
    ({"gpu-0": {"slices": 4 * 10**9}}, {"gpu-0": {"slices": 3 * 10**9}}, "", ""),
    ({"gpu-0": {"slices": 4 * 10**9}}, {"gpu-0": {"slices": 4 * 10**9}},
     "counter gpu-0/slices: 4 needed, 3 left", "counter gpu-0/slices: 4 needed, 3 left"),
    # another set already over: the scheduler's check of every set refuses, the touched-only one does not
    ({"gpu-1": {"slices": 8 * 10**9}}, {"gpu-0": {"slices": 10**9}},
     "counter gpu-1/slices: 0 needed, 0 left", ""),
    ({}, {"gpu-0": {"memory": 41 * Gi}}, "counter gpu-0/memory: 41Gi needed, 40Gi left",
     "counter gpu-0/memory: 41Gi needed, 40Gi left"),
    ({}, {"gpu-9": {"slices": 10**9}}, "", "counter gpu-9/slices: 1 needed, 0 left"),
    ({}, {"gpu-9": {"slices": 0}}, "", ""),
])
def test_counters_stay_within_their_sets(used, extra, every, only_touched):
    assert c.counter_shortfall(SETS, used, extra) == every
    assert c.counter_shortfall(SETS, used, extra, all_sets=False) == only_touched


def test_a_pool_is_oversubscribed_only_past_a_counter():
    assert not c.oversubscribed(SETS, {"gpu-0": {"slices": 7 * 10**9}})
    assert c.oversubscribed(SETS, {"gpu-1": {"slices": 7 * 10**9 + 1}})
    assert not c.oversubscribed(SETS, {})
