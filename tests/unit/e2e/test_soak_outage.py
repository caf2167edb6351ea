"""The soak's plugin-outage length (e2e/soak/faults.py): the issue's 10 minutes where the run has room for
them and the plugin's return, cut where it has not, left out where under 30 s would be left."""

from __future__ import annotations

import pytest

from e2e.soak import faults


@pytest.mark.parametrize(
    ("wanted", "left", "expected"),
    [
        (600.0, 780.0, 600.0),  # a 13-minute run: the full outage, back 3 minutes before the end
        (600.0, 150.0, 90.0),  # CI's 3-minute soak: cut so the plugin is back a minute before the end
        (45.0, 125.0, 45.0),
        (600.0, 89.0, 0.0),  # 29 s would be left: no outage this time
        (600.0, 90.0, 30.0),
    ],
)
def test_outage_length(wanted, left, expected):
    assert faults.outage_length(wanted, left) == expected


def test_outage_is_a_fault_kind_of_every_cluster():
    class _Cluster:  # what available() reads
        runtime = "cri-o"
        state_tmpfs_mib = 0

    assert faults.OUTAGE in faults.available(_Cluster(), gates_on=False)
