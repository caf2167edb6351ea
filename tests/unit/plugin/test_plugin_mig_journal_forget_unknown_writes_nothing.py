"""`forget` of a placement the MIG journal does not hold (a destroy retried after its record was already
forgotten) writes nothing: the journal is rewritten (a durable write, two fsyncs, under the node lock) only
when a record goes, and a node whose journal does not exist yet gets none from it."""

from __future__ import annotations

from pathlib import Path

from driver.plugin.mig.journal import MigJournal


def test_forgetting_an_unknown_placement_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "mig-journal.json"
    journal = MigJournal(path)
    journal.forget("GPU-0", 0)
    assert not path.exists()
    journal.intend("claim-a", "GPU-0", "1g.10gb", 0)
    written = path.stat().st_ino  # every save is a rename onto the path: a new inode
    journal.forget("GPU-0", 4)
    journal.forget("GPU-1", 0)
    assert path.stat().st_ino == written
    journal.forget("GPU-0", 0)
    assert path.stat().st_ino != written
    assert journal.entries() == []
