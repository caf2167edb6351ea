"""Benchmark: what one plugin process pays to adopt a checkpoint change another one made (issue 30, sixth
pass). Printed, never asserted.

Two plugin processes on one plugin directory (a rolling update, or more than one interpreter preparing)
each sync under the node lock before changing the state; with both busy, nearly every sync finds the other's
records. A sync that loads both files whole parses the snapshot and every log record (up to
max(COMPACT_MIN, claims) before a compaction); one that applies only the appended records parses those.
Each line: the other process appends 2 records (a prepare's PrepareStarted and PrepareCompleted), then
this process adopts them, with the log already holding `records` records; the median of REPEATS.
"""

from __future__ import annotations

import statistics
import time

from driver.plugin.state.checkpoint import (
    COMPACT_MIN,
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
)

REPEATS = 50
CLAIMS = 40  # prepared on the node meanwhile


def record(uid: str, state: str) -> ClaimRecord:
    dev = DeviceRecord(["r"], "node-a", "gpu-0", f"s-{uid}", [f"k8s.gpu.carve.dev/claim={uid}-gpu-0"], "vgpu")
    return ClaimRecord(uid, "default", f"claim-{uid}", state, [dev])


def adopt_cost(tmp_path, records: int, tail: bool) -> float:
    """Median time for this process to adopt the other's prepare, at a log of `records` records."""
    path = tmp_path / f"{records}-{tail}" / "checkpoint.json"
    path.parent.mkdir()
    state = {f"c{i}": record(f"c{i}", STATE_COMPLETED) for i in range(CLAIMS)}
    times = []
    for i in range(REPEATS):
        mine, other = Checkpoint(path, "b"), Checkpoint(path, "b")
        mine.save(state)  # a fresh snapshot, then the log as far as it got since that compaction
        for j in range(records):
            mine.save(state, [f"c{j % CLAIMS}"])
        other.load()
        theirs = dict(state)
        uid = f"new{i}"
        for phase in (STATE_STARTED, STATE_COMPLETED):  # the other process's prepare: two records
            theirs[uid] = record(uid, phase)
            other.save(theirs, [uid])
        t0 = time.perf_counter()
        loaded = mine.reload_if_changed(state if tail else None)
        times.append(time.perf_counter() - t0)
        assert loaded is not None and loaded.status == "ok" and loaded.claims.keys() == theirs.keys()
    return statistics.median(times)


def test_adopting_appended_records_against_a_whole_load(tmp_path):
    print(
        f"\n[bench] adopting another process's prepare (2 log records), {CLAIMS} claims prepared, "
        f"median of {REPEATS}"
    )
    for records in (0, COMPACT_MIN // 2, COMPACT_MIN - 4):
        whole = adopt_cost(tmp_path, records, tail=False)
        tail = adopt_cost(tmp_path, records, tail=True)
        print(
            f"[bench]   log of {records:3d} records: whole load {whole * 1e3:6.3f} ms  "
            f"appended only {tail * 1e3:6.3f} ms  ({whole / tail:5.1f}x)"
        )
