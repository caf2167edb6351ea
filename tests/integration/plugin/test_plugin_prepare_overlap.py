"""Prepares and their file writes (issue 30, docs/performance.md): the node lock is held only to record
PrepareStarted and PrepareCompleted, the claim's own files are written under its claim locks, and the
cross-process claim lock keeps another plugin process's recovery away from a claim in between. Inside one
process the prepares take turns at their local work (it waits on no disk, and interleaving it only costs
CPU), each waiting for its turn at most LOCAL_WORK_WAIT_S: a claim stuck in its writes does not hold up
the others for longer.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from support.plugin_harness import FAKE_LIB_READY, result
from support.prepare_bench import InProcessNode, soft_results

from driver.plugin.claims import preparer as preparer_module
from driver.plugin.state.checkpoint import STATE_COMPLETED, STATE_STARTED, Checkpoint
from driver.plugin.state.locks import ClaimFileLocks
from driver.plugin.state.recovery import recover


@pytest.fixture
def node(tmp_path, stub_cache) -> InProcessNode:
    if not FAKE_LIB_READY:
        pytest.fail("fake NVML not built: run `make native`")
    return InProcessNode(tmp_path, stub_cache)


def on_disk(node: InProcessNode) -> dict[str, str]:
    """What a plugin restarted now would read: claim UID -> state."""
    loaded = Checkpoint(node.checkpoint_path, "boot").load(move_aside=False)
    return {uid: c.state for uid, c in loaded.claims.items()}


def test_a_claim_writing_its_files_does_not_hold_up_another_claims_prepare(node, monkeypatch):
    first, second = node.put_claim("first", soft_results(0)), node.put_claim("second", soft_results(1))
    writing, release = threading.Event(), threading.Event()
    real = preparer_module.write_claim_files

    def slow_for_first(files, *args, **kwargs):
        if files.root.name == first.uid:
            writing.set()
            assert release.wait(30)
        return real(files, *args, **kwargs)

    monkeypatch.setattr(preparer_module, "write_claim_files", slow_for_first)
    answers: dict[str, str] = {}
    thread = threading.Thread(target=lambda: answers.update(first=node.prepare_one(first)))
    thread.start()
    try:
        assert writing.wait(30)
        # The first claim is between its two records: started on disk, its files not yet written.
        assert on_disk(node) == {first.uid: STATE_STARTED}
        started = time.monotonic()
        assert node.prepare_one(second) == ""
        # It waited its turn LOCAL_WORK_WAIT_S, then went on beside the stuck claim, not until its release.
        assert preparer_module.LOCAL_WORK_WAIT_S <= time.monotonic() - started < 1.0
        assert on_disk(node) == {first.uid: STATE_STARTED, second.uid: STATE_COMPLETED}
    finally:
        release.set()
        thread.join(30)
    assert answers == {"first": ""}
    # Answered only once PrepareCompleted is in the checkpoint: a crash after the answer loses nothing.
    assert on_disk(node) == {first.uid: STATE_COMPLETED, second.uid: STATE_COMPLETED}


def test_prepares_in_one_process_take_turns_at_their_local_work(node, monkeypatch):
    monkeypatch.setattr(preparer_module, "LOCAL_WORK_WAIT_S", 30.0)  # no turn given up on a slow machine
    refs = [node.put_claim(f"c{i}", soft_results(i)) for i in range(8)]
    inside, most = [0], [0]
    guard = threading.Lock()
    real = preparer_module.write_claim_files

    def counted(*args, **kwargs):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            threading.Event().wait(0.005)  # long enough for the others to arrive
            return real(*args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(preparer_module, "write_claim_files", counted)
    gate = threading.Barrier(len(refs))
    answers: dict[str, str] = {}

    def prepare(ref):
        gate.wait()
        answers[ref.uid] = node.prepare_one(ref)

    threads = [threading.Thread(target=prepare, args=(ref,)) for ref in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == {ref.uid: "" for ref in refs}
    assert most[0] == 1
    assert on_disk(node) == {ref.uid: STATE_COMPLETED for ref in refs}


def test_a_failure_between_the_records_rolls_back_that_claim_only(node, monkeypatch):
    good, bad = node.put_claim("good", soft_results(0)), node.put_claim("bad", soft_results(1))
    assert node.prepare_one(good) == ""
    real = preparer_module.write_claim_files

    def fail_for_bad(files, *args, **kwargs):
        if files.root.name == bad.uid:
            raise OSError(5, "Input/output error")
        return real(files, *args, **kwargs)

    monkeypatch.setattr(preparer_module, "write_claim_files", fail_for_bad)
    assert "internal error" in node.prepare_one(bad)
    assert on_disk(node) == {good.uid: STATE_COMPLETED}
    assert not (node.preparer.claims_dir / bad.uid).exists()
    assert not node.preparer.specs.path(bad.uid).exists()
    monkeypatch.setattr(preparer_module, "write_claim_files", real)
    assert node.prepare_one(bad) == ""  # the retry starts clean


def test_neighbours_preparing_at_once_count_each_other(node, monkeypatch):
    """The sharing runtime of a claim counts a neighbour that is between its records (its files are written
    without the node lock now): a best-effort claim prepared while a claim reserving 10% of the same GPU
    writes its files is held to the 90% left, not left unlimited."""
    a = node.put_claim("reserved", soft_results(0))
    best_effort = [result("s", "gpu-0", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi"})]
    b = node.put_claim("best-effort", best_effort)
    seen: dict[str, object] = {}
    writing, release = threading.Event(), threading.Event()
    real = preparer_module.write_claim_files

    def record(files, limiter_dir, limits, runtime, **kwargs):
        seen[files.root.name] = runtime
        if files.root.name == a.uid:
            writing.set()
            assert release.wait(30)
        return real(files, limiter_dir, limits, runtime, **kwargs)

    monkeypatch.setattr(preparer_module, "write_claim_files", record)
    thread = threading.Thread(target=node.prepare_one, args=(a,))
    thread.start()
    try:
        assert writing.wait(30)
        assert node.prepare_one(b) == ""
    finally:
        release.set()
        thread.join(30)
    assert seen[b.uid].shares == (90,), seen


def test_recovery_leaves_a_claim_another_process_is_preparing(node):
    ref = node.put_claim("inflight", soft_results(0))
    record = node.preparer._record(
        preparer_module.plan_claim(
            ref, node.cluster.get_resource_claim("b", "inflight"), "node-a", node.preparer.catalog()
        )
    )
    node.preparer.state[ref.uid] = record
    node.preparer._save(ref.uid)
    locks = ClaimFileLocks(node.preparer.settings.plugin_dir / "claims.lock")
    with locks.hold(ref.uid):  # another plugin process, between its PrepareStarted and PrepareCompleted
        assert recover(node.preparer) == "ok"
        assert on_disk(node) == {ref.uid: STATE_STARTED}
    assert recover(node.preparer) == "ok"  # nobody holds it: a crash's leftover, rolled back
    assert on_disk(node) == {}


def test_the_claim_file_lock_excludes_across_descriptors_and_threads(tmp_path):
    locks = ClaimFileLocks(tmp_path / "claims.lock")
    with locks.hold("a"):
        with locks.hold("a", wait=False) as got:
            assert got is False
        with locks.hold("b", wait=False) as got:
            assert got is True
        entered = threading.Event()
        waiter = threading.Thread(target=lambda: _hold_then_set(locks, "a", entered), daemon=True)
        waiter.start()
        assert not entered.wait(0.3)  # blocked while we hold it
    assert entered.wait(10)  # released with our descriptor
    waiter.join(10)


def _hold_then_set(locks: ClaimFileLocks, uid: str, event: threading.Event) -> None:
    with locks.hold(uid):
        event.set()
