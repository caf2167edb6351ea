"""Every on-disk format the plugin reads, loaded from a committed fixture of each version it supports.

An upgrade with live claims finds files the previous build wrote: these fixtures are those files, so a
change of layout that forgets the previous version fails here. (The checkpoint's two versions have their
own tests in test_plugin_checkpoint_log.py.) docs/reliability.md lists the formats and their versions.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from driver.limits import Region, read_limits
from driver.plugin.mig.journal import MigJournal
from driver.plugin.mig.partitioning_state import STATE_FILE, read_record, write_record

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "formats"


def test_limits_v1(tmp_path):
    path = tmp_path / "limits"
    shutil.copy(FIXTURES / "limits-v1.bin", path)
    path.chmod(0o444)
    view = read_limits(path)
    assert view.memory_limits == (4 << 30, 2 << 30) and view.cores_limits == (30, 50)
    assert (view.core_policy, view.priority, view.oom_policy) == ("force", "low", "kill")
    assert view.uuids == ("GPU-aaaa", "GPU-bbbb")


def test_region_v2(tmp_path):
    path = tmp_path / "region"
    shutil.copy(FIXTURES / "region-v2.bin", path)
    path.chmod(0o666)
    region = Region.open(path)
    try:
        assert region.device_count == 2
    finally:
        region.close()


def test_mig_journal_v1(tmp_path):
    shutil.copy(FIXTURES / "mig-journal-v1.json", tmp_path / "mig-journal.json")
    entries = MigJournal(tmp_path / "mig-journal.json").entries()
    assert [(e.claim, e.gpu_uuid, e.profile, e.start) for e in entries] == [
        ("u1", "GPU-0", "1g.10gb", 6),
        ("u2", "GPU-0", "2g.20gb", 4),
    ]


@pytest.mark.parametrize("version", [0, 1])
def test_partitioning_record_of_each_version_is_read_and_rewritten_as_the_current_one(tmp_path, version):
    shutil.copy(FIXTURES / f"partitioning-v{version}.json", tmp_path / STATE_FILE)
    record = read_record(tmp_path)
    assert record is not None
    assert (record.generation, record.desired, record.previous) == (
        3,
        {0: "mig", 1: "soft"},
        {0: "soft", 1: "soft"},
    )
    assert record.layouts == ({0: (("1g.10gb", 6), ("3g.40gb", None))} if version else {})
    write_record(tmp_path, record)
    assert b'"version": 1' in (tmp_path / STATE_FILE).read_bytes() and read_record(tmp_path) == record


def test_a_partitioning_record_of_a_newer_version_is_not_guessed_at(tmp_path):
    (tmp_path / STATE_FILE).write_text(
        '{"version": 9, "generation": 1, "desired": {}, "previous": {}, "state": "x"}'
    )
    assert read_record(tmp_path) is None
