"""A recorded NodePartitioning change is marked applied only when it is the change this plugin is applying:
a record asking for other strategies or layouts (written by a previous process for an older generation,
or before the newest change was read) stays APPLYING after a publish, whichever way the two differ."""

from __future__ import annotations

import pytest

from driver.cluster import LocalCluster
from driver.plugin.mig.partitioning import NodePartitioningApplier
from driver.plugin.mig.partitioning_state import APPLIED, APPLYING, ChangeRecord, read_record, write_record


def _applier(tmp_path, desired: dict[int, str], layouts: dict) -> NodePartitioningApplier:
    applier = NodePartitioningApplier(
        LocalCluster(), "node-a", tmp_path, lambda: [], lambda wanted: {}, lambda: None, lambda: {}
    )
    applier.desired, applier.layouts, applier.published_layouts = desired, layouts, layouts
    return applier


@pytest.mark.parametrize(
    ("recorded", "wanted"),
    [
        ({0: "mig"}, {0: "soft"}),  # the record's strategies sort before the wanted ones
        ({0: "soft"}, {0: "mig"}),  # and after
        ({0: "soft"}, {0: "soft", 1: "mig"}),  # a GPU more
    ],
)
def test_a_record_of_another_change_stays_applying(tmp_path, recorded, wanted):
    write_record(tmp_path, ChangeRecord(3, recorded, {0: "exclusive"}, APPLYING))
    _applier(tmp_path, wanted, {}).published()
    assert read_record(tmp_path).state == APPLYING


def test_the_record_of_this_change_is_applied_once_everything_is_published(tmp_path):
    write_record(tmp_path, ChangeRecord(3, {0: "soft"}, {0: "exclusive"}, APPLYING))
    _applier(tmp_path, {0: "soft"}, {}).published()
    assert read_record(tmp_path).state == APPLIED
