"""Recovery matches a journalled MIG instance to a claim's device by GPU *and* placement start: with two
instances on one GPU, a match by GPU alone keeps or destroys the wrong one after a crash."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord, MigRecord
from driver.plugin.state.recovery import _reconcile_journal

GPU = "GPU-0000"


@dataclass
class Entry:
    """A MIG journal entry (driver/plugin/mig/journal.py) with the fields recovery reads."""

    claim: str
    start: int
    uuid: str
    gpu_uuid: str = GPU
    profile: str = "1g.10gb"
    gpu_instance_id: int = 0
    compute_instance_id: int = 0
    state: str = "created"


@dataclass
class FakeMigs:
    entries_: list[Entry]
    destroyed: list[Entry] = field(default_factory=list)

    @property
    def journal(self) -> SimpleNamespace:
        return SimpleNamespace(entries=lambda: list(self.entries_))

    def destroy(self, entry: Entry) -> None:
        self.destroyed.append(entry)


def device(name: str, start: int) -> DeviceRecord:
    return DeviceRecord(
        request_names=["r"],
        pool="n1",
        device=name,
        share_id=None,
        cdi_ids=[],
        type="mig",
        gpu_uuid=GPU,
        mig=MigRecord(gpu_uuid=GPU, profile="1g.10gb", start=start),
    )


def preparer(devices: list[DeviceRecord], entries: list[Entry]) -> SimpleNamespace:
    claim = ClaimRecord(uid="claim-a", namespace="", name="", state=STATE_COMPLETED, devices=devices)
    return SimpleNamespace(state={"claim-a": claim}, migs=FakeMigs(entries))


def test_rebuilt_records_get_the_ids_of_the_instance_at_their_own_placement():
    p = preparer(
        [device("mig-0-1g-0", 0), device("mig-0-1g-4", 4)],
        [
            Entry("claim-a", 4, "MIG-at-4", gpu_instance_id=9),
            Entry("claim-a", 0, "MIG-at-0", gpu_instance_id=7),
        ],
    )
    _reconcile_journal(p)
    got = {d.device: (d.mig.uuid, d.mig.gpu_instance_id) for d in p.state["claim-a"].devices}
    assert got == {"mig-0-1g-0": ("MIG-at-0", 7), "mig-0-1g-4": ("MIG-at-4", 9)}
    assert p.migs.destroyed == []


def test_an_instance_at_another_placement_of_the_same_gpu_is_destroyed_not_kept():
    # The claim holds the instance at start 0; the journal also has one at start 4 for it (a crash in the
    # middle of a prepare that was later redone with a different placement): that one is an orphan.
    kept, orphan = Entry("claim-a", 0, "MIG-at-0"), Entry("claim-a", 4, "MIG-at-4")
    p = preparer([device("mig-0-1g-0", 0)], [orphan, kept])
    _reconcile_journal(p)
    assert p.migs.destroyed == [orphan]
    assert p.state["claim-a"].devices[0].mig.uuid == "MIG-at-0"


def test_an_instance_below_the_claims_own_placement_is_destroyed_not_kept():
    # The mirror of the case above: the claim holds start 4 and the orphan sits at start 0, below it. The
    # placement must be the same, not merely reached: a match by `>=` would keep the orphan.
    kept, orphan = Entry("claim-a", 4, "MIG-at-4"), Entry("claim-a", 0, "MIG-at-0")
    p = preparer([device("mig-0-1g-4", 4)], [orphan, kept])
    _reconcile_journal(p)
    assert p.migs.destroyed == [orphan]
    assert p.state["claim-a"].devices[0].mig.uuid == "MIG-at-4"


def test_an_instance_at_the_same_placement_of_another_gpu_is_destroyed_not_kept():
    # The claim holds start 0 of GPU-0000; the journal has it there and at start 0 of a GPU whose UUID sorts
    # below and of one that sorts above (a crash in the middle of a prepare redone on another GPU). The GPU
    # must be the same, not merely ordered before or after. The journal's UUIDs are read back from its JSON
    # file, as recovery reads them: equal strings, not the checkpoint's own objects.
    def read_back(uuid: str) -> str:
        return json.loads(json.dumps({"gpu": uuid}))["gpu"]

    below = Entry("claim-a", 0, "MIG-below", gpu_uuid=read_back("GPU-000"))  # a prefix: sorts below
    above = Entry("claim-a", 0, "MIG-above", gpu_uuid=read_back("GPU-0001"))
    kept = Entry("claim-a", 0, "MIG-kept", gpu_uuid=read_back(GPU))
    assert below.gpu_uuid < GPU < above.gpu_uuid and kept.gpu_uuid is not GPU
    p = preparer([device("mig-0-1g-0", 0)], [below, kept, above])
    _reconcile_journal(p)
    assert p.migs.destroyed == [below, above]
    assert p.state["claim-a"].devices[0].mig.uuid == "MIG-kept"
