"""driver/plugin/mig/modes.py: each GPU published only as its MIG mode allows; switches only on idle GPUs."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from driver import names
from driver.devices.catalog import fake_gpu
from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.mig.modes import (
    NEEDS_RESET,
    applied_strategies,
    apply_modes,
    fits,
    plan_modes,
    prepared_per_gpu,
    read_modes,
)
from driver.plugin.publisher import GATE_CONSUMABLE, GATE_PARTITIONABLE
from driver.plugin.state.checkpoint import ClaimRecord, DeviceRecord

MIG, SOFT, EXCL = names.STRATEGY_MIG, names.STRATEGY_SOFT, names.STRATEGY_EXCLUSIVE


class Switch:
    """MIG mode as NVML keeps it: a switch applies unless the GPU is busy (then it stays pending)."""

    def __init__(self, gpus=(), busy=(), broken=()):
        self.current = {g.uuid: g.mig_enabled for g in gpus}
        self.busy, self.broken = set(busy), set(broken)
        self.calls: list[tuple[str, bool]] = []

    def set_mig_mode(self, uuid, enabled):
        self.calls.append((uuid, enabled))
        if uuid in self.broken:
            raise RuntimeError("NVML_ERROR_NO_PERMISSION")
        current = self.current.get(uuid, not enabled)
        if uuid in self.busy and current != enabled:
            return (current, enabled)
        self.current[uuid] = enabled
        return (enabled, None)


def gpu(index=0, model="A100-80GB", mig=False, **kw):
    return dataclasses.replace(fake_gpu(model, index, "n1", mig_enabled=mig), **kw)


def test_the_fallback_is_decided_before_any_mode_change():
    # 1.34/1.35 with default gates: mig falls back to exclusive, so MIG mode must not be turned on at all.
    switch = Switch()
    gpus, modes = apply_modes([gpu(mig=False)], {0: MIG}, switch, {GATE_PARTITIONABLE})
    assert switch.calls == []
    assert modes[0].effective == EXCL and modes[0].applied == EXCL
    assert gpus[0].mig_enabled is False


def test_a_mig_gpu_under_the_fallback_is_switched_off_before_it_is_published_whole():
    switch = Switch()
    gpus, modes = apply_modes([gpu(mig=True)], {0: MIG}, switch, {GATE_PARTITIONABLE})
    assert switch.calls == [(gpus[0].uuid, False)]
    assert modes[0].applied == EXCL and gpus[0].mig_enabled is False


def test_mig_mode_is_turned_on_for_an_idle_gpu_that_wants_mig():
    switch = Switch()
    gpus, modes = apply_modes([gpu(mig=False)], {0: MIG}, switch)
    assert switch.calls == [(gpus[0].uuid, True)]
    assert modes[0].applied == MIG and modes[0].pending == "" and gpus[0].mig_enabled


def test_a_gpu_with_prepared_claims_is_neither_switched_nor_published():
    g = gpu(mig=True)
    switch = Switch()
    _, modes = apply_modes([g], {0: SOFT}, switch, prepared={g.uuid: 2})
    assert switch.calls == []
    assert modes[0].applied is None and modes[0].pending == "waiting for 2 prepared claims"
    assert applied_strategies(modes) == {}


def test_a_pending_switch_is_reported_for_that_gpu_only():
    a, b = gpu(0, mig=False), gpu(1, mig=False)
    gpus, modes = apply_modes([a, b], {0: MIG, 1: SOFT}, Switch([a, b], busy={a.uuid}))
    assert modes[0].applied is None and modes[0].pending == NEEDS_RESET
    assert gpus[0].mig_enabled is False and gpus[0].mig_pending is True
    assert modes[0].status()["pending"] == NEEDS_RESET and modes[0].status()["migMode"] == "disabled"
    assert applied_strategies(modes) == {1: SOFT}


def test_a_failing_switch_is_that_gpus_reason_and_does_not_raise():
    a, b = gpu(0, mig=True), gpu(1, mig=False)
    _, modes = apply_modes([a, b], {0: EXCL, 1: MIG}, Switch([a, b], broken={a.uuid}))
    assert modes[0].applied is None and "NVML_ERROR_NO_PERMISSION" in modes[0].pending
    assert modes[1].applied == MIG


def test_mig_is_never_switched_off_over_instances_carve_did_not_create():
    inst = MigInstance("MIG-foreign", 19, "1g.10gb", MigPlacement(6, 1), 13, 0, 10 << 30, 14)
    switch = Switch()
    _, modes = apply_modes([gpu(mig=True, mig_instances=(inst,))], {0: EXCL}, switch)
    assert switch.calls == [] and modes[0].applied is None and "MIG-foreign" in modes[0].pending


def test_a_change_left_pending_is_cancelled_on_an_idle_gpu():
    g = gpu(mig=True, mig_pending=False)  # someone asked for MIG off; it would apply at the next reset
    switch = Switch()
    _, modes = apply_modes([g], {0: MIG}, switch)
    assert switch.calls == [(g.uuid, True)] and modes[0].applied == MIG


def test_mig_on_a_gpu_without_mig_is_a_reason_not_a_crash():
    modes = plan_modes([gpu(model="T4")], {0: MIG})
    assert modes[0].applied is None and "no MIG support" in modes[0].pending


def test_prepared_claims_are_counted_once_per_gpu():
    def dev(uuid):
        return DeviceRecord([], "n1", "d", None, [], gpu_uuid=uuid)

    records = [
        ClaimRecord("a", "ns", "a", "PrepareCompleted", [dev("G0"), dev("G0"), dev("G1")]),
        ClaimRecord("b", "ns", "b", "PrepareStarted", [dev("G0")]),
    ]
    assert prepared_per_gpu(records) == {"G0": 2, "G1": 1}


strategy_names = st.sampled_from([MIG, SOFT, EXCL, names.STRATEGY_SLOTS, names.STRATEGY_TIMESLICE])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.sampled_from([None, True, False]),
            strategy_names,
            st.integers(0, 2),
            st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sets(st.sampled_from([GATE_CONSUMABLE, GATE_PARTITIONABLE])),
)
def test_published_gpus_always_match_their_real_mode(rows, gates):
    gpus, desired, prepared, busy = [], {}, {}, set()
    for i, (mig, pending, wanted, claims, is_busy) in enumerate(rows):
        g = gpu(i, mig=mig, mig_pending=None if pending == mig else pending)
        gpus.append(g)
        desired[i] = wanted
        prepared[g.uuid] = claims
        if is_busy:
            busy.add(g.uuid)
    switch = Switch(gpus, busy=busy)
    after, modes = apply_modes(gpus, desired, switch, gates, prepared)
    for g in after:
        m = modes[g.index]
        if m.applied is not None:
            assert fits(g, m.applied)  # never a MIG-mode GPU as a whole GPU, nor a plain GPU as MIG
            assert m.applied == m.effective
        else:
            assert m.pending
    switched = {uuid for uuid, _ in switch.calls}
    assert all(prepared[u] == 0 for u in switched)  # never a switch under a prepared claim


class Reader:
    def __init__(self, modes, instances=None, broken=()):
        self.modes, self.live, self.broken = modes, instances or {}, set(broken)

    def mig_mode(self, uuid):
        if uuid in self.broken:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return self.modes[uuid]

    def instances(self, uuid):
        return self.live.get(uuid, [])


def test_decisions_use_the_live_mode_not_the_inventory_taken_at_start():
    # The preparer turned MIG off for a whole-GPU claim: the record from start still says MIG on.
    g, t4 = gpu(0, mig=True), gpu(1, model="T4")
    fresh = read_modes([g, t4], Reader({g.uuid: (False, None)}))
    assert fresh[0].mig_enabled is False and fresh[1] == t4  # a GPU without MIG is not asked
    _, modes = apply_modes(fresh, {0: MIG}, Switch(fresh), prepared={g.uuid: 1})
    assert modes[0].applied is None and modes[0].pending == "waiting for 1 prepared claim"


def test_a_gpu_nvml_cannot_read_keeps_its_record():
    g = gpu(0, mig=True)
    assert read_modes([g], Reader({}, broken={g.uuid})) == [g]


def test_with_default_gates_off_mig_mode_is_never_turned_on_before_the_fallback():
    # A 1.34/1.35 API server with default gates: the dry-run probe finds DRAPartitionableDevices off, and the
    # GPU asked for as `mig` is published as a plain GPU whose mode was never touched.
    from driver.cluster import LocalCluster, fields_of_disabled_gates
    from driver.devices import Settings, build_slices
    from driver.plugin.publisher import Publisher

    gpus = [gpu(0, mig=False), gpu(1, model="T4")]
    switch = Switch(gpus)
    state = {"gpus": gpus}

    def select(_effective):
        state["gpus"], modes = apply_modes(state["gpus"], {0: MIG, 1: EXCL}, switch, publisher.gates_off)
        return applied_strategies(modes)

    cluster = LocalCluster(drop_fields=fields_of_disabled_gates([GATE_PARTITIONABLE]))
    publisher = Publisher(
        cluster,
        "n1",
        lambda chosen, gen: build_slices(
            "n1", [g for g in state["gpus"] if g.index in chosen], chosen, Settings(), "1.34", gen
        ),
        {0: MIG, 1: EXCL},
        sleep=lambda _s: None,
        select=select,
    )
    stored = publisher.publish()
    assert switch.calls == []  # the fallback was decided first: MIG mode never went on
    types = {d["name"]: d["attributes"]["type"]["string"] for s in stored for d in s["spec"]["devices"]}
    assert types == {"gpu-0": "gpu", "gpu-1": "gpu"}


def test_mig_mode_nvml_refuses_puts_the_gpu_on_the_fallback_once() -> None:
    a, b = gpu(0, mig=False), gpu(1, mig=False)
    switch = Switch([a, b], broken={a.uuid})
    refused: dict[str, str] = {}
    gpus, modes = apply_modes([a, b], {0: MIG, 1: MIG}, switch, refused=refused, fallback_to="soft")
    assert (modes[0].effective, modes[0].applied) == ("soft", "soft")
    assert "NVML_ERROR_NO_PERMISSION" in modes[0].fallback and modes[0].desired == MIG
    assert modes[1].applied == MIG and modes[1].fallback == ""
    assert set(refused) == {a.uuid}
    calls = len(switch.calls)
    _, again = apply_modes(gpus, {0: MIG, 1: MIG}, switch, refused=refused, fallback_to="soft")
    assert again[0].applied == "soft" and len(switch.calls) == calls  # not tried at every publish


def test_without_a_fallback_a_refused_switch_stays_a_pending_reason() -> None:
    a = gpu(0, mig=False)
    _, modes = apply_modes([a], {0: MIG}, Switch([a], broken={a.uuid}), refused={})
    assert modes[0].applied is None and "NVML_ERROR_NO_PERMISSION" in modes[0].pending
