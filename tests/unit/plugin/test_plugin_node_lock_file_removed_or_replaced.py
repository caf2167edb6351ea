"""The node lock after its file was removed (the plugin directory cleaned while the plugin runs): the next
hold takes the lock on a new file at the path, so another process that opens the path is excluded, instead of
a lock on the removed file that no one else can see. Likewise after its file was replaced by another at the
path (renamed over it: a plugin directory restored, a file made elsewhere and moved in): the next hold locks
the file now at the path, not the replaced one the kept descriptor still points to. The file is told by its
device and inode being the same, not ordered: a replacement whose inode number is below or above the first
file's is taken alike."""

from __future__ import annotations

import os
from pathlib import Path

from support.flock_probe import other_process_gets_lock

from driver.plugin.state.locks import NodeLock


def test_a_hold_after_the_lock_file_was_removed_locks_a_new_file_at_the_path(tmp_path):
    path = tmp_path / "plugin.lock"
    lock = NodeLock(path)
    with lock.hold():
        assert not other_process_gets_lock(path)
    path.unlink()
    with lock.hold():
        assert path.exists()
        assert not other_process_gets_lock(path)
    assert other_process_gets_lock(path)


def test_the_same_file_is_locked_again_after_a_release(tmp_path):
    path = tmp_path / "plugin.lock"
    lock = NodeLock(path)
    for _ in range(2):
        with lock.hold():
            assert not other_process_gets_lock(path)
        assert other_process_gets_lock(path)


def test_a_hold_after_the_lock_file_was_replaced_locks_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "plugin.lock"
    files = [tmp_path / f"made-{i}" for i in range(3)]
    for f in files:
        f.touch(mode=0o600)
    # ordered by inode number: the lock starts on the middle one, then gets a lower one, then a higher one
    lower, first, higher = sorted(files, key=lambda f: os.stat(f).st_ino)
    os.rename(first, path)
    lock = NodeLock(path)
    with lock.hold():
        assert not other_process_gets_lock(path)
    for replacement in (lower, higher):
        os.rename(replacement, path)  # the path never goes missing: only its inode changes
        with lock.hold():
            assert not other_process_gets_lock(path)
        assert other_process_gets_lock(path)
