"""Checkpoint version 2: a snapshot plus an append-only log, so one change writes a constant amount.

Also the committed fixtures of every checkpoint version: the plugin reads the previous version (1) and the
current one (2), and the first full save migrates 1 to 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from driver.plugin.state import checkpoint as cpmod
from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "formats"


def record(uid: str, state: str = STATE_COMPLETED) -> ClaimRecord:
    dev = DeviceRecord(
        ["r"], "node-a", "gpu-0", f"share-{uid}", [f"k8s.gpu.carve.dev/claim={uid}-gpu-0"], "vgpu"
    )
    return ClaimRecord(uid, "ns", f"c-{uid}", state, [dev])


def test_one_change_appends_one_record_whatever_the_number_of_claims(tmp_path):
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {f"u{i}": record(f"u{i}") for i in range(500)}
    cp.save(state)  # a full snapshot
    snapshot = (tmp_path / "checkpoint.json").read_bytes()
    sizes = []
    for i in range(3):
        state[f"new{i}"] = record(f"new{i}")
        before = (tmp_path / "checkpoint.log").stat().st_size if (tmp_path / "checkpoint.log").exists() else 0
        cp.save(state, [f"new{i}"])
        sizes.append((tmp_path / "checkpoint.log").stat().st_size - before)
    assert (tmp_path / "checkpoint.json").read_bytes() == snapshot  # untouched by the three changes
    assert max(sizes) < 600 and len(set(sizes)) == 1  # one small record each, independent of the 500
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load()
    assert loaded.status == "ok" and loaded.claims == state


def test_state_changes_and_removals_replay_in_order(tmp_path):
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {"a": record("a", STATE_STARTED)}
    cp.save({})
    cp.save(state, ["a"])
    state["a"].state = STATE_COMPLETED
    cp.save(state, ["a"])
    state["b"] = record("b")
    cp.save(state, ["b"])
    del state["a"]
    cp.save(state, ["a"])
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load()
    assert loaded.claims == state and loaded.claims["b"].state == STATE_COMPLETED


def test_the_log_is_folded_into_a_snapshot_once_it_outgrows_the_claims(tmp_path, monkeypatch):
    monkeypatch.setattr(cpmod, "COMPACT_MIN", 4)
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {f"u{i}": record(f"u{i}") for i in range(3)}
    cp.save(state)
    for i in range(10):  # a claim's record changes again and again (prepare started, completed, ...)
        state["u0"] = record("u0", STATE_STARTED if i % 2 else STATE_COMPLETED)
        cp.save(state, ["u0"])
        lines = (tmp_path / "checkpoint.log").read_text().splitlines()
        assert len(lines) <= max(4, len(state))
    doc = json.loads((tmp_path / "checkpoint.json").read_text())
    assert doc["version"] == 2 and doc["data"]["seq"] >= 5  # at least one fold happened
    assert Checkpoint(tmp_path / "checkpoint.json", "b").load().claims == state


def test_a_torn_last_record_is_dropped_but_a_bad_middle_record_is_corruption(tmp_path):
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {"a": record("a")}
    cp.save({})
    cp.save(state, ["a"])
    log = tmp_path / "checkpoint.log"
    good = log.read_bytes()
    log.write_bytes(good + b'{"seq": 2, "op": "put", "uid": "b", "cla')  # the crash interrupted a write
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load()
    assert loaded.status == "ok" and set(loaded.claims) == {"a"}
    log.write_bytes(good.replace(b'"op":"put"', b'"op":"del"') + good)  # checksum broken, not the last line
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load()
    assert loaded.status == "corrupt" and "checkpoint.log line 1" in loaded.detail
    assert loaded.moved_to and not log.exists() and not (tmp_path / "checkpoint.json").exists()


def test_a_gap_in_the_sequence_is_corruption(tmp_path):
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {"a": record("a"), "b": record("b")}
    cp.save({})
    cp.save(state, ["a"])
    cp.save(state, ["b"])
    lines = (tmp_path / "checkpoint.log").read_bytes().splitlines(keepends=True)
    (tmp_path / "checkpoint.log").write_bytes(lines[1])  # the record of seq 1 lost
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load(move_aside=False)
    assert loaded.status == "corrupt" and "seq 2 follows 0" in loaded.detail


def test_records_already_in_the_snapshot_are_skipped(tmp_path):
    # A crash after a new snapshot was written and before the log was emptied.
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {"a": record("a")}
    cp.save({})
    cp.save(state, ["a"])
    stale_log = (tmp_path / "checkpoint.log").read_bytes()
    del state["a"]
    cp.save(state)  # snapshot with seq 1, log emptied
    (tmp_path / "checkpoint.log").write_bytes(stale_log)
    assert Checkpoint(tmp_path / "checkpoint.json", "b").load().claims == {}


def test_another_process_appending_is_seen_by_reload_if_changed(tmp_path):
    mine = Checkpoint(tmp_path / "checkpoint.json", "b")
    mine.save({})
    other = Checkpoint(tmp_path / "checkpoint.json", "b")
    assert other.load().status == "ok"
    state = {"x": record("x")}
    other.save(state, ["x"])
    reloaded = mine.reload_if_changed()
    assert reloaded is not None and reloaded.claims == state
    mine.save({**state, "y": record("y")}, ["y"])  # continues the other's sequence
    assert Checkpoint(tmp_path / "checkpoint.json", "b").load().claims.keys() == {"x", "y"}


def test_fixture_v1_is_read_and_a_full_save_migrates_it_to_v2(tmp_path):
    shutil.copy(FIXTURES / "checkpoint-v1.json", tmp_path / "checkpoint.json")
    cp = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    loaded = cp.load()
    assert loaded.status == "ok" and set(loaded.claims) == {"u1", "u2"}
    assert loaded.claims["u1"].devices[0].mig.start == 6
    cp.save(loaded.claims)  # what recovery does at every start
    doc = json.loads((tmp_path / "checkpoint.json").read_text())
    assert doc["version"] == 2 and doc["data"]["seq"] == 0
    assert Checkpoint(tmp_path / "checkpoint.json", "boot-1").load().claims == loaded.claims


def test_fixture_v2_snapshot_and_log_are_read(tmp_path):
    for name in ("checkpoint.json", "checkpoint.log"):
        shutil.copy(FIXTURES / "checkpoint-v2" / name, tmp_path / name)
    loaded = Checkpoint(tmp_path / "checkpoint.json", "boot-1").load()
    assert loaded.status == "ok" and set(loaded.claims) == {
        "u2"
    }  # u1 put in the snapshot, deleted in the log


def test_an_unknown_version_names_the_file_and_the_versions_read(tmp_path):
    (tmp_path / "checkpoint.json").write_text(json.dumps({"version": 3, "checksum": "", "data": {}}))
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load(move_aside=False)
    assert loaded.status == "corrupt" and "checkpoint.json: version: 3 is not one of [1, 2]" in loaded.detail


def _full_disk_after(monkeypatch, nbytes: int, truncate_fails: bool = False) -> None:
    """os.write as on a filesystem with `nbytes` left: a partial write, then ENOSPC (write(2) semantics)."""
    import errno
    import os

    left = [nbytes]
    real_write, real_truncate = os.write, os.ftruncate

    def write(fd: int, data) -> int:
        if left[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_write(fd, bytes(data[: left[0]]))
        left[0] -= n
        return n

    def ftruncate(fd: int, length: int) -> None:
        if truncate_fails:
            raise OSError(errno.EIO, "Input/output error")
        real_truncate(fd, length)

    monkeypatch.setattr(cpmod.os, "write", write)
    monkeypatch.setattr(cpmod.os, "ftruncate", ftruncate)


def test_an_append_torn_by_a_full_disk_is_cut_back_and_later_records_still_load(tmp_path, monkeypatch):
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {"a": record("a")}
    cp.save(state)
    cp.save(state, ["a"])
    state["b"] = record("b")
    with monkeypatch.context() as m:
        _full_disk_after(m, 40)  # part of b's record reaches the disk
        try:
            cp.save(state, ["b"])
            raise AssertionError("a failed append must raise")
        except OSError as e:
            assert e.errno == 28
    assert (tmp_path / "checkpoint.log").read_bytes().endswith(b"\n")  # no torn line left
    # Space again: the next changes append after the cut, and a fresh process reads every one of them.
    cp.save(state, ["b"])
    state["c"] = record("c")
    cp.save(state, ["c"])
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load()
    assert loaded.status == "ok" and loaded.claims == state


def test_a_torn_append_that_cannot_be_cut_back_is_replaced_by_a_snapshot(tmp_path, monkeypatch):
    cp = Checkpoint(tmp_path / "checkpoint.json", "b")
    state = {"a": record("a")}
    cp.save(state)
    state["b"] = record("b")
    with monkeypatch.context() as m:
        _full_disk_after(m, 40, truncate_fails=True)
        try:
            cp.save(state, ["b"])
            raise AssertionError("a failed append must raise")
        except OSError:
            pass
    state["c"] = record("c")
    cp.save(state, ["c"])  # a whole snapshot this time: the log with the torn line is emptied
    assert (tmp_path / "checkpoint.log").read_bytes() == b""
    loaded = Checkpoint(tmp_path / "checkpoint.json", "b").load()
    assert loaded.status == "ok" and loaded.claims == state
