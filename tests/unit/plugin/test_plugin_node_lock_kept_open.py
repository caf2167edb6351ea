"""The node lock keeps its file open between holds (a prepare takes the lock twice; issue 30's fixed
costs): while the file at the path is the one it opened, the next hold locks through the same descriptor
instead of closing it and opening the file again. Seen as the process's descriptors on the lock file."""

from __future__ import annotations

import os
from pathlib import Path

from driver.plugin.state.locks import NodeLock


def _descriptors_on(path: Path) -> set[int]:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                out.add(int(name))
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return out


def test_the_next_hold_locks_through_the_descriptor_already_open(tmp_path: Path) -> None:
    path = tmp_path / "plugin.lock"
    lock = NodeLock(path)
    # a descriptor opened before the lock's and closed after the first hold: the lowest free number,
    # which a close and open again of the lock file would take
    spare = os.open(os.devnull, os.O_RDONLY)
    try:
        with lock.hold():
            first = _descriptors_on(path)
    finally:
        os.close(spare)
    assert len(first) == 1 and min(first) > spare
    assert _descriptors_on(path) == first  # kept open while nobody holds the lock
    for _ in range(2):
        with lock.hold():
            assert _descriptors_on(path) == first
