"""The MIG journal (<plugin-dir>/mig-journal.json) is the plugin's own: written 0600, as its module says,
readable and writable by root only. It names what carve created and will destroy; no one else may read or
run it, whatever the umask."""

from __future__ import annotations

import stat

from driver.plugin.mig.journal import MigJournal


def test_the_journal_is_written_0600(tmp_path) -> None:
    journal = MigJournal(tmp_path / "mig-journal.json")
    journal.intend("claim-1", "GPU-0", "1g.10gb", 6)
    assert stat.S_IMODE((tmp_path / "mig-journal.json").stat().st_mode) == 0o600
    assert [(e.claim, e.gpu_uuid, e.start) for e in journal.entries()] == [("claim-1", "GPU-0", 6)]
