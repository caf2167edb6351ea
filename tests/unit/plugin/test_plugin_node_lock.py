"""The node lock (<plugin-dir>/plugin.lock): only root may open it, two plugin processes never hold it at
once, and one thread may take it again inside itself (survivors of generated mutants in
driver/plugin/state/locks.py)."""

from __future__ import annotations

import fcntl
import os
import stat
import threading

from support.flock_probe import other_process_gets_lock

from driver.plugin.state.locks import ClaimLocks, NodeLock


def test_the_lock_file_is_created_for_its_owner_only(tmp_path):
    # a lock anyone can open is a lock anyone can hold: a pod with the host path could stall the plugin
    old = os.umask(0)  # the mode is the code's own, not the umask's
    try:
        lock = NodeLock(tmp_path / "plugin.lock")
        with lock.hold():
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "plugin.lock").stat().st_mode) == 0o600


def test_another_process_cannot_take_the_lock_while_it_is_held_even_reentered(tmp_path):
    path = tmp_path / "plugin.lock"
    lock = NodeLock(path)
    with lock.hold():
        assert not other_process_gets_lock(path)
        with lock.hold():  # reentered by the same thread: no deadlock, still held
            assert not other_process_gets_lock(path)
        assert not other_process_gets_lock(path)  # the inner release keeps the outer hold
    assert other_process_gets_lock(path)
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released in this process too
    finally:
        os.close(fd)


def test_a_claims_lock_serialises_its_callers_and_is_dropped_after_the_last(tmp_path):
    locks = ClaimLocks()
    inside, overlap = [], []
    gate = threading.Barrier(2)

    def prepare():
        gate.wait()
        with locks.hold("uid-1"):
            inside.append(1)
            overlap.append(len(inside))
            threading.Event().wait(0.05)
            inside.pop()

    threads = [threading.Thread(target=prepare) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert overlap == [1, 1]
    assert len(locks) == 0
