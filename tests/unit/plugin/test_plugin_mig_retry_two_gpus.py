"""A prepare retried for a MIG claim adopts the instance the journal records for it on *its* GPU, when
another GPU has carve's instance of another claim at the same placement start (a survivor of generated
mutants in driver/plugin/mig/journal.py: `find` matched the placement and not the GPU)."""

from __future__ import annotations

import pytest

from driver import names
from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef, PrepareError
from driver.plugin.mig.instances import MigKeeper
from driver.plugin.mig.journal import MigJournal


class Ops:
    """Each GPU's live instances; creating is a failure here (a retry must adopt, not create)."""

    def __init__(self, live):
        self.live = live

    def instances(self, gpu_uuid):
        return list(self.live[gpu_uuid])

    def create(self, gpu_uuid, profile, start):
        raise AssertionError(f"created {profile} at {start} on {gpu_uuid}")


def _instance(uuid, gi):
    return MigInstance(uuid, 19, "1g.10gb", MigPlacement(0, 1), gi, 0, 10 << 30, 14)


def _device(gpu):
    return NodeDevice(name=f"mig-{gpu}", type=names.TYPE_MIG, gpu_uuid=gpu, minor=0, profile="1g.10gb",
                      placement_start=0)


@pytest.mark.parametrize("first", ["GPU-A", "GPU-B"])
def test_a_retried_prepare_adopts_its_own_gpus_instance_not_the_other_gpus(tmp_path, first):
    journal = MigJournal(tmp_path / "mig.json")
    mine, theirs = _instance("MIG-b", 3), _instance("MIG-a", 7)
    other = "GPU-A" if first == "GPU-B" else "GPU-B"
    # both GPUs have carve's instance at start 0; whichever the journal lists first
    recorded = {"GPU-A": ("claim-a", theirs), "GPU-B": ("claim-b", mine)}
    for gpu in (first, other):
        journal.created(recorded[gpu][0], gpu, recorded[gpu][1])
    keeper = MigKeeper(Ops({"GPU-A": [theirs], "GPU-B": [mine]}), journal)
    assert keeper.create(ClaimRef("ml", "b", "claim-b"), _device("GPU-B")) == mine
    assert keeper.create(ClaimRef("ml", "a", "claim-a"), _device("GPU-A")) == theirs
    with pytest.raises(PrepareError, match="MIG-b is held by claim claim-b"):
        keeper.create(ClaimRef("ml", "c", "claim-c"), _device("GPU-B"))


def test_recording_or_forgetting_an_instance_on_one_gpu_keeps_the_others_at_the_same_start(tmp_path):
    journal = MigJournal(tmp_path / "mig.json")
    journal.created("claim-a", "GPU-A", _instance("MIG-a", 7))
    journal.created("claim-b", "GPU-B", _instance("MIG-b", 3))
    journal.intend("claim-c", "GPU-C", "1g.10gb", 0)  # about to create at start 0 on a third GPU
    assert sorted((e.gpu_uuid, e.claim) for e in journal.entries()) == [
        ("GPU-A", "claim-a"), ("GPU-B", "claim-b"), ("GPU-C", "claim-c")]
    journal.forget("GPU-A", 0)
    assert sorted(e.gpu_uuid for e in journal.entries()) == ["GPU-B", "GPU-C"]
    assert journal.find("GPU-B", 0).uuid == "MIG-b" and journal.find("GPU-A", 0) is None
