"""A NodePartitioning change is recorded applied only once every GPU publishes the strategy it was given
(driver/plugin/mig/partitioning.py, `published`): a GPU still publishing its old strategy while its prepared
claims hold up the switch keeps the change APPLYING, so a plugin restarted meanwhile resumes it, and the
status says Applied False, whichever way the old and the new strategy sort."""

from __future__ import annotations

import pytest

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.mig.modes import GpuMode
from driver.plugin.mig.partitioning import NodePartitioningApplier
from driver.plugin.mig.partitioning_state import APPLIED, APPLYING, ChangeRecord, read_record, write_record

WAITING = "waiting for 1 prepared claim"


def _applier(tmp_path, modes: dict[int, GpuMode], desired: dict[int, str]) -> NodePartitioningApplier:
    applier = NodePartitioningApplier(
        LocalCluster(), "node-a", tmp_path, lambda: [], lambda wanted: {}, lambda: None, lambda: modes
    )
    applier.desired = desired
    return applier


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (names.STRATEGY_EXCLUSIVE, names.STRATEGY_MIG),  # the published strategy sorts before the new one
        (names.STRATEGY_SOFT, names.STRATEGY_MIG),  # and after it
        (names.STRATEGY_MIG, names.STRATEGY_EXCLUSIVE),
        (names.STRATEGY_MIG, names.STRATEGY_SOFT),
    ],
)
def test_a_gpu_waiting_for_its_claims_keeps_the_change_applying(tmp_path, old: str, new: str) -> None:
    write_record(
        tmp_path,
        ChangeRecord(2, {0: new, 1: names.STRATEGY_SOFT}, {0: old, 1: names.STRATEGY_SOFT}, APPLYING),
    )
    modes = {
        0: GpuMode(0, "GPU-0", new, new, old, old == names.STRATEGY_MIG, WAITING),
        1: GpuMode(1, "GPU-1", names.STRATEGY_SOFT, names.STRATEGY_SOFT, names.STRATEGY_SOFT, False),
    }
    applier = _applier(tmp_path, modes, {0: new, 1: names.STRATEGY_SOFT})
    applier.published()
    assert read_record(tmp_path).state == APPLYING
    # Once the claim is gone and the GPU publishes its new strategy, the change is done.
    modes[0] = GpuMode(0, "GPU-0", new, new, new, new == names.STRATEGY_MIG)
    applier.published()
    assert read_record(tmp_path).state == APPLIED
