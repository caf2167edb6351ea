"""Locks: one per claim inside the process, and one file lock for the node's plugin state.

The kubelet may call prepare for the same claim twice at once (retries); the claim lock makes the second
call wait and then find the claim prepared. The node lock guards the checkpoint and the devices, and is
also a `flock` on `<plugin-dir>/plugin.lock`, so during a rolling update two plugin processes never
change state at the same time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path


class ClaimLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, uid: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(uid, (threading.Lock(), 0))
            self._locks[uid] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[uid]
                if users == 1:
                    del self._locks[uid]  # no unbounded growth over the node's lifetime
                else:
                    self._locks[uid] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class NodeLock:
    """A threading lock plus an exclusive flock on a file; reentrant within one thread."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._depth = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth == 0:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    # Closing the descriptor releases the flock.
                    os.close(self._fd)
                    self._fd = None
