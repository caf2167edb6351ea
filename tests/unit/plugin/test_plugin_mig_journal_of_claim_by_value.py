"""At unprepare the MIG instances to destroy are the journal's entries of the claim (`of_claim`, the claim's
UID): the journal is read back from its file and the UID comes from the checkpoint record, so the two are
equal strings, never the same object. Each claim gets exactly its own entries, those still only intended
included (recovery destroys what such a creation may have left)."""

from __future__ import annotations

from pathlib import Path

from driver.plugin.mig.journal import MigJournal


def test_a_claims_entries_are_found_by_its_uid_read_back_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mig-journal.json"
    writer = MigJournal(path)
    writer.intend("uid-a", "GPU-0", "1g.10gb", 0)
    writer.intend("uid-b", "GPU-0", "1g.10gb", 1)
    writer.intend("uid-a", "GPU-1", "3g.40gb", 4)
    reader = MigJournal(path)
    # The UID as the checkpoint record holds it: built at run time, not the literal written above.
    uid = "".join(["uid-", "a"])
    assert sorted((e.gpu_uuid, e.start, e.profile) for e in reader.of_claim(uid)) == [
        ("GPU-0", 0, "1g.10gb"),
        ("GPU-1", 4, "3g.40gb"),
    ]
    assert [e.start for e in reader.of_claim("".join(["uid-", "b"]))] == [1]
    assert reader.of_claim("uid-c") == []
