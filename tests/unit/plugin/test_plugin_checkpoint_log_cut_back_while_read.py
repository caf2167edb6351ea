"""Two processes share the checkpoint (the plugin and the one it replaces, under the node lock in turns).
When the other writer's append fails it cuts the log back to where that append began; a reader that saw
the longer log and then read fewer bytes than it saw must not take the shorter read as the new end: it
loads the files whole, and afterwards knows the log as it is, so the next look finds nothing changed
(with the end it saw, every later look reported a change that was not one and read both files again)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver.plugin.state.checkpoint import STATE_COMPLETED, Checkpoint, ClaimRecord


def _claims(*uids: str) -> dict[str, ClaimRecord]:
    return {u: ClaimRecord(u, "ns", f"claim-{u}", STATE_COMPLETED) for u in uids}


def test_a_log_cut_back_between_its_stat_and_its_read_is_loaded_whole_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    writer = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    reader.save(_claims("u1"))  # a snapshot
    writer.load()
    writer.save(_claims("u1", "u2"), ["u2"])  # a log record
    assert reader.reload_if_changed(_claims("u1")).claims.keys() == {"u1", "u2"}  # the tail, read
    writer.save(_claims("u1", "u2", "u3"), ["u3"])
    whole = reader.log_path.stat().st_size
    with open(reader.log_path, "ab") as f:  # the writer's next append, torn in the middle of its write
        f.write(b'{"seq":4,"op":"put","uid":"u4","cl')

    real_stamp = reader._file_stamp
    cut: list[int] = []

    def stamp_then_cut_back() -> tuple | None:
        # The reader stats the files; then the writer's failed append is cut back (os.ftruncate to where
        # it began) before the reader reads the log's new bytes.
        stamp = real_stamp()
        if not cut:
            os.truncate(reader.log_path, whole)
            cut.append(whole)
        return stamp

    monkeypatch.setattr(reader, "_file_stamp", stamp_then_cut_back)
    loaded = reader.reload_if_changed(_claims("u1", "u2"))
    assert cut == [whole]
    assert loaded is not None and loaded.status == "ok"
    assert loaded.claims.keys() == {"u1", "u2", "u3"}
    assert reader.reload_if_changed(loaded.claims) is None  # nothing changed since that load
    writer.save(_claims("u1", "u2", "u3", "u5"), ["u5"])  # and the next append is read as one
    assert reader.reload_if_changed(loaded.claims).claims.keys() == {"u1", "u2", "u3", "u5"}
