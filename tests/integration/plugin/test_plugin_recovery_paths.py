"""Recovery at plugin start (driver/plugin/state/recovery.py) on each of its paths, with a real Preparer: a
rebooted node's claims undone, a lost checkpoint rebuilt from the CDI specs with each device's type, GPU and
MIG placement (and a device the node no longer has, or a spec naming another claim's device), an interrupted
prepare another process still holds left to it while the others are rolled back, and an orphan MIG instance
whose destroy fails kept for the next start instead of stopping the plugin."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from support.preparer_world import lose_checkpoint, preparer_world, put

from driver import names
from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer
from driver.plugin.faults import ENV_FAULT
from driver.plugin.state.checkpoint import STATE_COMPLETED, STATE_STARTED, Checkpoint
from driver.plugin.state.locks import ClaimFileLocks
from driver.plugin.state.recovery import recover

GI = 1024**3
CATALOG = {
    "gpu-0-mig-1g10gb-6": NodeDevice(
        "gpu-0-mig-1g10gb-6", names.TYPE_MIG, "GPU-0", 0, {"memory": 10 * GI}, profile="1g.10gb",
        placement_start=6,
    ),
    "gpu-0-mig-1g10gb-0": NodeDevice(
        "gpu-0-mig-1g10gb-0",
        names.TYPE_MIG,
        "GPU-0",
        0,
        {"memory": 10 * GI},
        profile="1g.10gb",
        placement_start=0,
    ),
    "gpu-1": NodeDevice("gpu-1", names.TYPE_VGPU, "GPU-1", 1, {"memory": 80 * GI, "cores": 100}),
}  # fmt: skip
SHARE = "0b0e0a0d-1111-4222-8333-444455556666"
MIG = {"request": "m", "device": "gpu-0-mig-1g10gb-6"}
MIG_AT_0 = {"request": "m", "device": "gpu-0-mig-1g10gb-0"}  # the GPU's first placement: start 0
SOFT = {
    "request": "s",
    "device": "gpu-1",
    "shareID": SHARE,
    "consumedCapacity": {"memory": "2Gi", "cores": "10"},
}


class Mig:
    """NVML's MIG calls as the preparer makes them, over a dict; `fail_destroy` makes destroy raise."""

    def __init__(self):
        self.live: dict[tuple[str, int], MigInstance] = {}
        self.next_gi = 1
        self.fail_destroy = False

    def create(self, gpu_uuid, profile, start):
        inst = MigInstance(
            f"MIG-{gpu_uuid}-{start}", 19, profile, MigPlacement(start, 1), self.next_gi, 0, 10 * GI, 14
        )
        self.next_gi += 1
        self.live[(gpu_uuid, start)] = inst
        return inst

    def destroy(self, gpu_uuid, gi, ci, uuid):
        if self.fail_destroy:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        (key,) = [k for k, v in self.live.items() if k[0] == gpu_uuid and v.uuid == uuid]
        del self.live[key]

    def instances(self, gpu_uuid):
        return [v for k, v in self.live.items() if k[0] == gpu_uuid]

    def set_mig_mode(self, gpu_uuid, enabled):
        return enabled, None


@pytest.fixture
def world(tmp_path, stub_cache):
    catalog = dict(CATALOG)
    cluster, mig, make = preparer_world(
        tmp_path, stub_cache, catalog, Mig(), checkpoint=tmp_path / "plugin" / "checkpoint.json"
    )
    return cluster, mig, make, catalog


def prepared(make, cluster, *claims) -> tuple[Preparer, list[ClaimRef]]:
    p = make()
    recover(p)
    refs = [put(cluster, name, results) for name, results in claims]
    assert {r.error for r in p.prepare(refs).values()} == {""}
    return p, refs


def test_after_a_reboot_every_recorded_claim_is_undone(world, tmp_path):
    cluster, mig, make, _ = world
    p, (a, b) = prepared(make, cluster, ("a", [MIG]), ("b", [SOFT]))
    assert len(mig.live) == 1 and p.specs.claim_uids() == {a.uid, b.uid}
    q = make(boot="b2")
    assert recover(q) == "rebooted"
    assert q.state == {}
    assert mig.live == {}  # the instance the previous boot's claim recorded is destroyed
    assert q.specs.claim_uids() == set()
    assert list(q.claims_dir.uids()) == []


def test_after_a_reboot_an_instance_only_the_checkpoint_names_is_destroyed(world, tmp_path):
    # a claim prepared before the MIG journal existed: its checkpoint record alone names its instance
    cluster, mig, make, _ = world
    prepared(make, cluster, ("a", [MIG]))
    (tmp_path / "plugin" / "mig-journal.json").unlink()
    assert len(mig.live) == 1
    assert recover(make(boot="b2")) == "rebooted"
    assert mig.live == {}


def _recover_in_child(make, boot: str) -> None:
    os.environ[ENV_FAULT] = "unprepare-after-cdi"
    recover(make(boot=boot))


def test_a_reboots_undo_passes_no_fault_point(world, tmp_path):
    # CARVE_FAULT's unprepare points are for the kubelet's unprepare: recovery runs before the plugin serves
    cluster, _, make, _ = world
    prepared(make, cluster, ("a", [SOFT]))
    child = multiprocessing.get_context("fork").Process(target=_recover_in_child, args=(make, "b2"))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert make().specs.claim_uids() == set()


@pytest.mark.parametrize("mig_device", [MIG, MIG_AT_0], ids=["start-6", "start-0"])
def test_a_lost_checkpoint_is_rebuilt_with_each_devices_type_gpu_and_mig_placement(
    world, tmp_path, mig_device
):
    cluster, mig, make, _ = world
    _, (ref,) = prepared(make, cluster, ("a", [mig_device, SOFT]))
    lose_checkpoint(tmp_path / "plugin")
    stray = tmp_path / "plugin" / "claims" / "not-a-prepared-claim"  # a directory no claim owns
    stray.mkdir()
    q = make()
    assert recover(q) == "missing"
    record = q.state[ref.uid]
    assert record.state == STATE_COMPLETED
    got = {d.device: (d.type, d.gpu_uuid, d.share_id, d.pool) for d in record.devices}
    assert got == {
        mig_device["device"]: (names.TYPE_MIG, "GPU-0", None, "node-a"),
        "gpu-1": (names.TYPE_VGPU, "GPU-1", SHARE, "node-a"),
    }
    start = CATALOG[mig_device["device"]].placement_start
    (m,) = [d.mig for d in record.devices if d.mig]
    assert (m.gpu_uuid, m.profile, m.start, m.uuid) == (
        "GPU-0",
        "1g.10gb",
        start,
        mig.live[("GPU-0", start)].uuid,
    )
    assert [d.mig for d in record.devices if d.device == "gpu-1"] == [None]
    assert list(q.claims_dir.uids()) == [ref.uid]  # the stray directory removed, the claim's kept
    # and it unprepares as the claim it was: the instance destroyed, the spec gone
    assert q.unprepare([ref]) == {ref.uid: ""}
    assert mig.live == {} and q.specs.claim_uids() == set()


def test_a_rebuilt_device_the_node_no_longer_offers_has_no_type_gpu_or_instance(world, tmp_path):
    cluster, _, make, catalog = world
    _, (ref,) = prepared(make, cluster, ("a", [SOFT]))
    lose_checkpoint(tmp_path / "plugin")
    del catalog["gpu-1"]  # the GPU is gone from the node's devices since
    q = make()
    assert recover(q) == "missing"
    (d,) = q.state[ref.uid].devices
    assert (d.device, d.share_id, d.type, d.gpu_uuid, d.mig) == ("gpu-1", SHARE, "", "", None)


def test_a_spec_naming_a_device_of_another_claim_is_removed_and_the_specs_after_it_rebuilt(world, tmp_path):
    cluster, _, make, _ = world
    p, refs = prepared(make, cluster, ("a", [SOFT]), ("b", [SOFT]), ("c", [SOFT]))
    bad, *good = sorted(refs, key=lambda r: r.uid)  # specs are read in UID order: the bad one first
    lose_checkpoint(tmp_path / "plugin")
    path = p.specs.path(bad.uid)
    path.write_text(path.read_text().replace(f'"{bad.uid}-', f'"{good[0].uid}-'))
    q = make()
    assert recover(q) == "missing"
    assert set(q.state) == {r.uid for r in good}
    assert q.specs.claim_uids() == {r.uid for r in good}


def _hold(path: str, uid: str, held, release) -> None:
    with ClaimFileLocks(Path(path)).hold(uid):
        held.set()
        release.wait(60)


def test_an_interrupted_prepare_another_process_holds_is_left_and_the_others_are_rolled_back(world, tmp_path):
    cluster, _, make, _ = world
    _, refs = prepared(make, cluster, ("a", [SOFT]), ("b", [SOFT]), ("c", [SOFT]))
    # every claim recorded as PrepareStarted, as a crash (or another process) between its records leaves it
    cp = Checkpoint(tmp_path / "plugin" / "checkpoint.json", "b1")
    records = cp.load().claims
    for r in records.values():
        r.state = STATE_STARTED
    cp.save(records)
    busy = next(r for r in refs if r.uid == next(iter(cp.load().claims)))  # the first record recovery reads
    ctx = multiprocessing.get_context("fork")
    held, release = ctx.Event(), ctx.Event()
    other = ctx.Process(
        target=_hold, args=(str(tmp_path / "plugin" / "claims.lock"), busy.uid, held, release)
    )
    other.start()
    try:
        assert held.wait(30)
        q = make()
        assert recover(q) == "ok"
    finally:
        release.set()
        other.join(30)
    assert set(q.state) == {busy.uid} and q.state[busy.uid].state == STATE_STARTED
    assert q.specs.claim_uids() == {busy.uid}


def test_an_orphan_instance_whose_destroy_fails_is_kept_for_the_next_start(world, tmp_path):
    cluster, mig, make, _ = world
    p, (ref,) = prepared(make, cluster, ("a", [MIG]))
    lose_checkpoint(tmp_path / "plugin")
    p.specs.remove(ref.uid)  # nothing proves the prepare completed: its instance is an orphan
    mig.fail_destroy = True
    q = make()
    assert recover(q) == "missing"
    assert q.state == {} and len(mig.live) == 1  # NVML refused: logged, the plugin goes on
    mig.fail_destroy = False
    assert recover(make()) == "ok"
    assert mig.live == {}
