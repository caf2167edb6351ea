"""The Preparer in process, with MIG emulated by a dict: recovery paths. A crash mid-prepare, a lost or
corrupt checkpoint, a vanished or unreadable CDI spec, a corrupt MIG journal, a half-done prepare of another
process, stray claim directories: each is recovered from what is left (specs, the MIG journal, NVML's
instances), never fatal, and nothing carve made is leaked."""

from __future__ import annotations

import pytest
from support.preparer_world import MIXED, lose_checkpoint, preparer_world, put

from driver import names
from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
    MigRecord,
)
from driver.plugin.state.recovery import recover


@pytest.fixture
def world(tmp_path, stub_cache):
    return preparer_world(tmp_path, stub_cache)


def test_a_prepared_claim_whose_spec_vanished_is_prepared_again_with_its_instance(world):
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED)
    before = p.prepare([ref])[ref.uid]
    instance = mig.live[("GPU-0", 6)]
    p.specs.path(ref.uid).unlink()  # e.g. /var/run/cdi emptied by hand
    again = p.prepare([ref])[ref.uid]
    assert again.error == "" and again.devices == before.devices
    assert p.specs.path(ref.uid).exists()
    assert mig.live == {("GPU-0", 6): instance} and mig.created == 1  # kept, not recreated
    assert p.unprepare([ref]) == {ref.uid: ""} and mig.live == {}


def test_an_instance_from_a_prepare_that_crashed_is_destroyed_despite_a_corrupt_checkpoint(world, tmp_path):
    # A crash after the MIG instance was created, then the checkpoint is lost: no CDI spec names the claim,
    # only the MIG journal does, and that is enough to destroy the instance at the next start.
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[:1])
    p.migs.journal.intend(ref.uid, "GPU-0", "1g.10gb", 6)
    p.migs.journal.created(ref.uid, "GPU-0", mig.create("GPU-0", "1g.10gb", 6))
    (tmp_path / "checkpoint.json").write_text("{garbage")
    q = make()
    assert recover(q) == "corrupt"
    assert mig.live == {} and q.migs.journal.entries() == [] and q.state == {}
    assert q.prepare([ref])[ref.uid].error == "" and len(mig.live) == 1


def test_a_creating_record_names_the_instance_at_its_placement(world):
    # The crash came between NVML's create and the journal's update: the entry has no ids yet.
    _, mig, make = world
    p = make()
    recover(p)
    p.migs.journal.intend("gone-claim", "GPU-0", "1g.10gb", 6)
    mig.create("GPU-0", "1g.10gb", 6)
    foreign = mig.create("GPU-0", "1g.10gb", 5)  # no record: not carve's
    recover(make())
    assert mig.live == {("GPU-0", 5): foreign}


def test_lost_checkpoint_is_rebuilt_from_cdi_specs_and_mig_state(world, tmp_path):
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED)
    before = p.prepare([ref])[ref.uid]
    lose_checkpoint(tmp_path)
    q = make()
    assert recover(q) == "missing"
    rebuilt = q.state[ref.uid]
    assert sorted(d.cdi_ids[0] for d in rebuilt.devices) == sorted(d.cdi_ids[0] for d in before.devices)
    assert {d.share_id for d in rebuilt.devices} == {None, MIXED[1]["shareID"]}
    assert [d.mig.gpu_instance_id for d in rebuilt.devices if d.mig] == [1]
    assert q.unprepare([ref]) == {ref.uid: ""}
    assert mig.live == {} and q.specs.claim_uids() == set()


def test_a_prepare_another_process_left_half_done_is_undone_before_preparing_again(world, tmp_path):
    # Another process crashed mid-prepare: its checkpoint says PrepareStarted with a MIG instance at start 5.
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[:1])
    made = mig.create("GPU-0", "1g.10gb", 5)
    stale = ClaimRecord(
        ref.uid,
        "ns",
        "a",
        STATE_STARTED,
        [
            DeviceRecord(
                ["m"],
                "node-a",
                "gpu-0-mig-1g10gb-5",
                None,
                [],
                names.TYPE_MIG,
                "GPU-0",
                MigRecord("GPU-0", "1g.10gb", 5, made.gpu_instance_id, made.uuid, 0),
            )
        ],
    )
    Checkpoint(tmp_path / "checkpoint.json", "b1").save({ref.uid: stale})
    assert p.prepare([ref])[ref.uid].error == ""
    assert list(mig.live) == [("GPU-0", 6)]
    assert p.state[ref.uid].state == STATE_COMPLETED


def test_recovery_removes_claim_dirs_that_no_claim_owns(world, tmp_path):
    cluster, _, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[1:])
    assert p.prepare([ref])[ref.uid].error == ""
    stray = tmp_path / "plugin" / "claims" / "not-a-prepared-claim"
    stray.mkdir()
    (stray / "region").write_bytes(b"x")
    assert recover(make()) == "ok"
    assert sorted(d.name for d in (tmp_path / "plugin" / "claims").iterdir()) == [ref.uid]


@pytest.mark.parametrize("content", ['{"devices": [{"containerEdits": {}}]}', '{"devices": [', ""])
def test_an_unreadable_cdi_spec_is_removed_when_rebuilding_the_checkpoint(world, tmp_path, content):
    # The plugin must not crash-loop on its own files: a spec it cannot read is dropped, the others kept.
    cluster, _, make = world
    p = make()
    recover(p)
    good, bad = put(cluster, "good", MIXED[1:]), put(cluster, "bad", MIXED[1:])
    assert {r.error for r in p.prepare([good, bad]).values()} == {""}
    lose_checkpoint(tmp_path)
    p.specs.path(bad.uid).write_text(content)
    q = make()
    assert recover(q) == "missing"
    assert set(q.state) == {good.uid}
    assert q.specs.claim_uids() == {good.uid}


def test_a_corrupt_mig_journal_is_moved_aside_not_fatal(world, tmp_path):
    _, _, make = world
    p = make()
    journal = tmp_path / "plugin" / "mig-journal.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("{not json")
    assert recover(p) == "missing" and p.migs.journal.entries() == []
    assert list(journal.parent.glob("mig-journal.json.corrupt-*"))
