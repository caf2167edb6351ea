"""The node lock after its file was replaced by another at the path (renamed over it: a plugin directory
restored, a file made elsewhere and moved in): the next hold locks the file now at the path, which another
process opens, not the replaced one that the kept descriptor still points to. The file is told by its
device and inode being the same, not ordered: a replacement whose inode number is below or above the
first file's is taken alike."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from driver.plugin.state.locks import NodeLock


def _other_process_gets_it(path: Path) -> bool:
    probe = textwrap.dedent(
        f"""
        import fcntl, os, sys
        fd = os.open({str(path)!r}, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit(3)
        """
    )
    rc = subprocess.run([sys.executable, "-c", probe], timeout=60, capture_output=True, text=True)
    assert rc.returncode in (0, 3), rc.stderr
    return rc.returncode == 0


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
        assert not _other_process_gets_it(path)
    for replacement in (lower, higher):
        os.rename(replacement, path)  # the path never goes missing: only its inode changes
        with lock.hold():
            assert not _other_process_gets_it(path)
        assert _other_process_gets_it(path)
