"""Which live MIG instance carve's journal proves its own (driver/plugin/mig/journal.py, `names`), as a
retried prepare and an unprepare see it: a `creating` entry (the plugin died between asking NVML and
recording the answer) owns whatever instance of its profile sits at its placement; a `created` entry owns
only the instance with its UUID and GPU instance id, so an instance recreated by hand at the same place
(same profile, new UUID or ids) or one of another profile is never adopted or destroyed. A journal that
cannot be read is moved aside and proves nothing (its instances are no longer carve's)."""

from __future__ import annotations

import json
import logging

import pytest

from driver import names
from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef, PrepareError
from driver.plugin.mig.instances import MigKeeper
from driver.plugin.mig.journal import CREATING, MigJournal

GPU = "GPU-0"
REF = ClaimRef("ml", "c", "claim-1")


class Ops:
    def __init__(self, live):
        self.live, self.destroyed, self.made = list(live), [], []

    def instances(self, gpu_uuid):
        return list(self.live)

    def create(self, gpu_uuid, profile, start):
        self.made.append((profile, start))
        inst = _instance("MIG-new", profile, start, 11)
        self.live.append(inst)
        return inst

    def destroy(self, gpu_uuid, gi, ci, uuid):
        self.destroyed.append(uuid)


def _instance(uuid, profile="1g.10gb", start=2, gi=5):
    return MigInstance(uuid, 19, profile, MigPlacement(start, 1), gi, 0, 10 << 30, 14)


def _device(profile="1g.10gb", start=2):
    return NodeDevice(
        name="gpu-0-mig", type=names.TYPE_MIG, gpu_uuid=GPU, minor=0, profile=profile, placement_start=start
    )


def test_a_creating_entry_owns_the_instance_of_its_profile_at_its_placement(tmp_path):
    journal = MigJournal(tmp_path / "mig.json")
    journal.intend(REF.uid, GPU, "1g.10gb", 2)  # the plugin died before NVML's answer was recorded
    (entry,) = journal.entries()
    assert (entry.state, entry.uuid) == (CREATING, None)
    there = _instance("MIG-made", gi=7)
    ops = Ops([there])
    assert MigKeeper(ops, journal).create(REF, _device()) == there
    assert ops.made == []
    (entry,) = journal.entries()
    assert (entry.uuid, entry.gpu_instance_id) == ("MIG-made", 7)


@pytest.mark.parametrize(
    "there",
    [
        _instance("MIG-other", "2g.20gb", gi=5),  # another profile at the same start
        _instance("MIG-recreated", gi=5),  # recreated by hand: a new UUID
        _instance("MIG-ours", gi=6),  # the recorded UUID under another GPU instance id
    ],
)
def test_a_created_entry_does_not_own_an_instance_recreated_at_its_place(tmp_path, there):
    journal = MigJournal(tmp_path / "mig.json")
    journal.created(REF.uid, GPU, _instance("MIG-ours", gi=5))
    ops = Ops([there])
    with pytest.raises(PrepareError, match="is already there and carve did not create it"):
        MigKeeper(ops, journal).create(REF, _device(there.profile_name))
    (entry,) = journal.entries()
    ops_destroy = Ops([there])
    MigKeeper(ops_destroy, journal).destroy(entry)
    assert ops_destroy.destroyed == []  # unprepare leaves someone else's instance alone


def test_a_creating_entry_does_not_own_an_instance_of_another_profile(tmp_path):
    journal = MigJournal(tmp_path / "mig.json")
    journal.intend(REF.uid, GPU, "1g.10gb", 2)
    ops = Ops([_instance("MIG-other", "2g.20gb")])
    with pytest.raises(PrepareError, match="carve did not create it"):
        MigKeeper(ops, journal).create(REF, _device())
    (entry,) = journal.entries()
    MigKeeper(ops, journal).destroy(entry)
    assert ops.destroyed == []


def test_the_recorded_instance_is_the_one_destroyed(tmp_path):
    journal = MigJournal(tmp_path / "mig.json")
    journal.created(REF.uid, GPU, _instance("MIG-ours", gi=5))
    (entry,) = journal.entries()
    ops = Ops([_instance("MIG-elsewhere", start=4, gi=5), _instance("MIG-ours", gi=5)])
    MigKeeper(ops, journal).destroy(entry)
    assert ops.destroyed == ["MIG-ours"] and journal.entries() == []


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"version": 2, "instances": []}),
        json.dumps([1]),
        json.dumps({"version": 1}),
        json.dumps(
            {"version": 1, "instances": [{"claim": "c", "gpu_uuid": GPU, "profile": "p", "start": 0, "x": 1}]}
        ),
    ],
)
def test_a_journal_that_cannot_be_read_is_moved_aside_and_proves_nothing(tmp_path, caplog, text):
    path = tmp_path / "mig.json"
    path.write_text(text)
    journal = MigJournal(path)
    with caplog.at_level(logging.ERROR):
        assert journal.entries() == []
    assert not path.exists()
    (aside,) = tmp_path.glob("mig.json.corrupt-*")
    assert aside.read_text() == text
    (record,) = [r for r in caplog.records if r.getMessage() == "mig-journal.corrupt"]
    assert record.fields["moved_to"] == str(aside) and record.fields["path"] == str(path)
    assert "nvidia-smi mig -lgi" in record.fields["action"]
    # a retry at that place now finds an instance carve cannot prove its own
    with pytest.raises(PrepareError, match="carve did not create it"):
        MigKeeper(Ops([_instance("MIG-x")]), journal).create(REF, _device())


def test_a_journal_of_another_version_names_it(tmp_path, caplog):
    path = tmp_path / "mig.json"
    path.write_text(json.dumps({"version": 7, "instances": []}))
    with caplog.at_level(logging.ERROR):
        MigJournal(path).entries()
    (record,) = [r for r in caplog.records if r.getMessage() == "mig-journal.corrupt"]
    assert record.fields["error"] == "ValueError: version: 7"
