"""Unprepare of a MIG claim whose instance is gone (destroyed by hand, or a GPU reset) or replaced by
someone else's at the same place: nothing is destroyed, the reason is logged (naming the instance found
there, if any, and only it: not the GPU's other instances before or after it, other claims' instances an
operator reading the log must not take for the one that replaced this claim's) and the record is forgotten,
so unprepare completes (survivors of generated mutants in driver/plugin/mig/instances.py: the log line
itself raising, the found list taken from the wrong places)."""

from __future__ import annotations

import logging

import pytest

from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.mig.instances import MigKeeper
from driver.plugin.mig.journal import MigJournal

GPU = "GPU-0"


class Ops:
    def __init__(self, live):
        self.live, self.destroyed = live, []

    def instances(self, gpu_uuid):
        return list(self.live)

    def destroy(self, gpu_uuid, gi, ci, uuid):
        self.destroyed.append(uuid)


def _instance(uuid, start, gi):
    return MigInstance(uuid, 19, "1g.10gb", MigPlacement(start, 1), gi, 0, 10 << 30, 14)


@pytest.mark.parametrize(("live", "found"), [([], None), ([_instance("MIG-theirs", 2, 9)], "MIG-theirs")])
def test_a_recorded_instance_that_is_gone_is_not_destroyed_and_is_forgotten(tmp_path, caplog, live, found):
    journal = MigJournal(tmp_path / "mig.json")
    journal.created("claim-1", GPU, _instance("MIG-ours", 2, 5))
    (entry,) = journal.entries()
    ops = Ops(live)
    with caplog.at_level(logging.WARNING):
        MigKeeper(ops, journal).destroy(entry)
    assert ops.destroyed == []
    assert journal.entries() == []
    (record,) = [r for r in caplog.records if r.getMessage() == "mig.not-found"]
    assert record.fields["recorded"] == "MIG-ours" and record.fields["found"] == ([found] if found else None)
    why = "; the instance there is not carve's" if found else ""
    assert record.fields["action"] == "nothing destroyed" + why


def test_the_warning_names_only_the_instance_at_the_recorded_placement(tmp_path, caplog):
    journal = MigJournal(tmp_path / "mig.json")
    journal.created("claim-1", GPU, _instance("MIG-ours", 2, 5))
    (entry,) = journal.entries()
    live = [_instance("MIG-before", 0, 7), _instance("MIG-theirs", 2, 9), _instance("MIG-after", 4, 11)]
    ops = Ops(live)
    with caplog.at_level(logging.WARNING):
        MigKeeper(ops, journal).destroy(entry)
    assert ops.destroyed == []
    (record,) = [r for r in caplog.records if r.getMessage() == "mig.not-found"]
    assert record.fields["found"] == ["MIG-theirs"]
