"""A plugin that starts without a checkpoint numbers its first log record 1 and folds the log into a
snapshot once it holds more than COMPACT_MIN records, as one that loaded a checkpoint does (a survivor
of generated mutants in driver/plugin/state/checkpoint.py: the counters reset by a load that found no
file)."""

from __future__ import annotations

import json

from driver.plugin.state.checkpoint import (
    COMPACT_MIN,
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
)


def _records(cp: Checkpoint) -> list[dict]:
    return [json.loads(line) for line in cp.log_path.read_text().splitlines()]


def test_a_fresh_checkpoint_numbers_from_1_and_compacts_after_compact_min_records(tmp_path):
    cp = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    assert cp.load().status == "missing"
    # one claim changed again and again (its state flips): the log grows, the claims do not
    states = (STATE_STARTED, STATE_COMPLETED)
    for i in range(COMPACT_MIN):
        cp.save({"u": ClaimRecord("u", "ns", "c", states[i % 2])}, ["u"])
    records = _records(cp)
    assert [r["seq"] for r in records] == list(range(1, COMPACT_MIN + 1))
    assert not cp.path.exists()  # all of it in the log so far
    claims = {"u": ClaimRecord("u", "ns", "c", STATE_COMPLETED)}
    cp.save(claims, ["u"])  # one more than COMPACT_MIN: folded into the snapshot
    assert cp.log_path.read_text() == ""
    snapshot = json.loads(cp.path.read_text())["data"]
    assert snapshot["seq"] == COMPACT_MIN and list(snapshot["claims"]) == ["u"]  # the last record it holds
    again = Checkpoint(cp.path, "boot-1").load()
    assert again.status == "ok" and set(again.claims) == set(claims)
