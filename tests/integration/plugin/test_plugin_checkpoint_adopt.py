"""Adopting another plugin process's checkpoint changes by their log records only (issue 30, sixth pass).

Two processes on one plugin directory (a rolling update, or the sixth pass's measurement) each sync under
the node lock before changing the state. When the other one only appended log records, `reload_if_changed`
applies those to the caller's state instead of reading the snapshot and the whole log; anything else (a new
snapshot, a torn or bad record, a gap in seq) falls back to the whole load, which judges the files.
"""

from __future__ import annotations

import random

import pytest

from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
)


def record(uid: str, state: str = STATE_COMPLETED) -> ClaimRecord:
    dev = DeviceRecord(["r"], "node-a", "gpu-0", f"s-{uid}", [f"k8s.gpu.carve.dev/claim={uid}-gpu-0"], "vgpu")
    return ClaimRecord(uid, "ns", f"c-{uid}", state, [dev])


class Writer:
    """One plugin process's view: its state and its Checkpoint, syncing before each change as the
    Preparer does under the node lock."""

    def __init__(self, path):
        self.cp = Checkpoint(path, "b")
        loaded = self.cp.load()
        self.state = dict(loaded.claims)
        if loaded.status == "missing":
            self.cp.save(self.state)  # the snapshot recovery writes at a plugin's start

    def sync(self) -> None:
        loaded = self.cp.reload_if_changed(self.state)
        if loaded is not None:
            assert loaded.status == "ok", loaded
            self.state = dict(loaded.claims)

    def put(self, uid: str, state: str = STATE_COMPLETED) -> None:
        self.sync()
        self.state[uid] = record(uid, state)
        self.cp.save(self.state, [uid])

    def delete(self, uid: str) -> None:
        self.sync()
        self.state.pop(uid, None)
        self.cp.save(self.state, [uid])


def _no_whole_load(cp: Checkpoint, monkeypatch) -> None:
    def refused(*_a, **_k):
        raise AssertionError("a whole load where appended records were enough")

    monkeypatch.setattr(cp, "load", refused)


def test_appended_records_are_applied_without_a_whole_load(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.json"
    mine, other = Writer(path), Writer(path)
    mine.put("a")
    other.put("x")  # other adopts a, then appends x
    other.put("y", STATE_STARTED)
    other.delete("a")
    before = dict(mine.state)
    _no_whole_load(mine.cp, monkeypatch)
    loaded = mine.cp.reload_if_changed(mine.state)
    assert loaded is not None and loaded.status == "ok"
    assert loaded.claims == {"x": record("x"), "y": record("y", STATE_STARTED)}
    assert mine.state == before  # the caller's dict is copied, not changed behind its back
    assert mine.cp.reload_if_changed(loaded.claims) is None  # nothing new since
    mine.state = dict(loaded.claims)
    mine.put("z")  # continues the other's sequence
    monkeypatch.undo()
    assert Checkpoint(path, "b").load().claims == {**loaded.claims, "z": record("z")}


def test_a_new_snapshot_by_the_other_process_is_read_whole(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.json"
    mine, other = Writer(path), Writer(path)
    mine.put("a")
    other.sync()
    other.state["b"] = record("b")
    other.cp.save(other.state)  # a compaction: new snapshot, emptied log
    calls = []
    real = mine.cp.load
    monkeypatch.setattr(mine.cp, "load", lambda *a, **k: calls.append(1) or real(*a, **k))
    loaded = mine.cp.reload_if_changed(mine.state)
    assert calls == [1] and loaded.status == "ok" and set(loaded.claims) == {"a", "b"}


def test_a_torn_append_is_left_to_the_whole_load(tmp_path):
    path = tmp_path / "checkpoint.json"
    mine, other = Writer(path), Writer(path)
    mine.put("a")
    other.put("x")
    with open(path.with_suffix(".log"), "ab") as f:
        f.write(b'{"seq": 99, "op": "pu')  # a process killed in the middle of its append
    loaded = mine.cp.reload_if_changed(mine.state)
    assert loaded.status == "ok" and set(loaded.claims) == {"a", "x"}  # the torn line dropped, x kept


def test_a_bad_appended_record_is_reported_as_the_whole_load_does(tmp_path):
    path = tmp_path / "checkpoint.json"
    mine, other = Writer(path), Writer(path)
    mine.put("a")
    other.put("x")
    log = path.with_suffix(".log")
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]) + lines[-1].replace(b'"x"', b'"q"', 1) + lines[-1])
    loaded = mine.cp.reload_if_changed(mine.state)
    assert loaded.status == "corrupt" and "checkpoint.log line" in loaded.detail
    assert mine.state == {"a": record("a")}


def test_a_gap_in_seq_is_reported_as_the_whole_load_does(tmp_path):
    path = tmp_path / "checkpoint.json"
    mine, other = Writer(path), Writer(path)
    mine.put("a")
    other.put("x")
    other.cp._seq += 1  # a record lost between two appends
    other.put("y")
    loaded = mine.cp.reload_if_changed(mine.state)
    assert loaded.status == "corrupt" and "follows" in loaded.detail


@pytest.mark.parametrize("seed", range(6))
def test_interleaved_writers_adopt_exactly_what_a_whole_load_reads(tmp_path, seed):
    # Two processes (or three) changing random claims in turn, compacting now and then (COMPACT_MIN
    # lowered): after every step each writer's state equals what a fresh load of the files gives.
    import driver.plugin.state.checkpoint as cpmod

    rng = random.Random(seed)
    path = tmp_path / "checkpoint.json"
    old = cpmod.COMPACT_MIN
    cpmod.COMPACT_MIN = 5
    try:
        writers = [Writer(path) for _ in range(rng.choice((2, 3)))]
        for _step in range(120):
            w = rng.choice(writers)
            uid = f"u{rng.randrange(8)}"
            if rng.random() < 0.4:
                w.delete(uid)
            else:
                w.put(uid, rng.choice((STATE_STARTED, STATE_COMPLETED)))
            truth = Checkpoint(path, "b").load(move_aside=False).claims
            assert w.state == truth
            for other in writers:
                other.sync()
                assert other.state == truth
    finally:
        cpmod.COMPACT_MIN = old


def test_after_a_failed_append_the_next_adoption_reads_the_files_whole(tmp_path, monkeypatch):
    # A full disk mid-append: the caller's state may now hold a change the files lack, so applying the
    # other process's records to it would carry that change on; the next adoption must read the files.
    import errno

    from driver.plugin.state import checkpoint as cpmod

    path = tmp_path / "checkpoint.json"
    mine, other = Writer(path), Writer(path)
    mine.put("a")

    def full(_fd, _data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cpmod.os, "write", full)
    mine.state["b"] = record("b")
    with pytest.raises(OSError):
        mine.cp.save(mine.state, ["b"])  # b is in mine.state, not in the files
    monkeypatch.undo()
    other.put("x")
    loaded = mine.cp.reload_if_changed(mine.state)
    assert loaded.status == "ok" and set(loaded.claims) == {"a", "x"}  # the files' truth: no b
