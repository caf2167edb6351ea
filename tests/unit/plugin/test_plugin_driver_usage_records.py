"""The cgroups whose usage the plugin asks the driver for (driver/plugin/enforcement/driverusage.py): the
records carve-cdi-hook wrote under <claim dir>/cgroups, one absolute path each, in name order and at most
256 of them. A record being written (.tmp), a directory, a link, a relative or undecodable record, and a
record longer than any path Linux takes (4095 bytes, PATH_MAX less its NUL) are no cgroup of the claim:
skipped, never cut short into another path."""

from __future__ import annotations

import os
from pathlib import Path

from driver.plugin.container.enforcement_edits import CGROUPS_DIR
from driver.plugin.enforcement.driverusage import recorded_cgroups

LONGEST = 4095  # PATH_MAX (4096) less the terminating NUL


def _records(claim_dir: Path) -> Path:
    records = claim_dir / CGROUPS_DIR
    records.mkdir(parents=True)
    return records


def test_only_whole_absolute_paths_of_plain_records_are_taken_in_name_order(tmp_path: Path) -> None:
    records = _records(tmp_path)
    longest = "/" + "c" * (LONGEST - 1)
    (records / "b-longest").write_text(longest)
    (records / "a-pod").write_text("/sys/fs/cgroup/kubepods/pod1/ctr-a")
    (records / "c-too-long").write_text("/" + "x" * LONGEST)  # a byte more than a path
    (records / "d-writing.tmp").write_text("/sys/fs/cgroup/kubepods/pod1/ctr-d")
    (records / "e-relative").write_text("kubepods/pod1/ctr-e")
    (records / "f-undecodable").write_bytes(b"/sys/fs/cgroup/\xff")
    (records / "g-directory").mkdir()
    os.symlink(records / "a-pod", records / "h-link")
    (records / "i-pod").write_text("/sys/fs/cgroup/kubepods/pod2/ctr-i")
    assert recorded_cgroups(tmp_path) == [
        "/sys/fs/cgroup/kubepods/pod1/ctr-a",
        longest,
        "/sys/fs/cgroup/kubepods/pod2/ctr-i",
    ]


def test_at_most_256_records_are_read(tmp_path: Path) -> None:
    records = _records(tmp_path)
    for i in range(257):
        (records / f"ctr-{i:03d}").write_text(f"/sys/fs/cgroup/kubepods/ctr-{i:03d}")
    found = recorded_cgroups(tmp_path)
    assert found == [f"/sys/fs/cgroup/kubepods/ctr-{i:03d}" for i in range(256)]
