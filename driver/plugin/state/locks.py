"""Locks: one per claim inside the process and across processes, and one file lock for the node's state.

The kubelet may call prepare for the same claim twice at once (retries); the claim lock makes the second
call wait and then find the claim prepared. The node lock guards the checkpoint and the devices, and is
also a `flock` on `<plugin-dir>/plugin.lock`, so during a rolling update two plugin processes never
change the checkpoint at the same time. A claim's own files (its directory, its CDI spec) are written
under its claim locks between two short holds of the node lock, so another process is not held up by them
(docs/performance.md); the cross-process claim lock (`ClaimFileLocks`) keeps another plugin process from
rolling back or preparing that claim meanwhile. Inside one process a prepare's local work is serialized
(the Preparer's local-work lock, a plain threading lock). Order: the claim's locks, the local-work lock,
then the node lock; whoever holds the node lock only tries a claim's file lock (never waits for it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import struct
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
    """A threading lock plus an exclusive flock on a file; reentrant within one thread.

    The file stays open between holds (a prepare takes the lock twice): LOCK_UN releases the flock, and a
    descriptor whose file was removed (the plugin directory cleaned) is opened again."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._thread_lock = threading.RLock()
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None
        self._depth = 0

    def _open(self) -> int:
        try:
            st = os.stat(self.path)
            if self._fd is not None and (st.st_dev, st.st_ino) == self._ino:
                return self._fd
        except FileNotFoundError:
            pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        st = os.fstat(fd)
        self._fd, self._ino = fd, (st.st_dev, st.st_ino)
        return fd

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth == 0:
                fcntl.flock(self._open(), fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)


class ClaimFileLocks:
    """One exclusive lock per claim UID shared by every plugin process of the node: an open file
    description lock (F_OFD_SETLK) on one byte of `<plugin-dir>/claims.lock`, at an offset hashed from the
    UID (48 bits: two UIDs that collide only wait for each other). OFD locks belong to the descriptor, so
    threads of one process exclude each other too, and closing another descriptor of the file releases
    nothing (unlike POSIX record locks); the kernel drops them when a crashed process's descriptor closes.
    """

    def __init__(self, path: Path):
        self.path = Path(path)

    @staticmethod
    def _flock(uid: str, kind: int) -> bytes:
        offset = int.from_bytes(hashlib.blake2b(uid.encode(), digest_size=6).digest(), "big")
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padded as the C struct
        return struct.pack("hhqqi4x", kind, os.SEEK_SET, offset, 1, 0)

    @contextlib.contextmanager
    def hold(self, uid: str, wait: bool = True) -> Iterator[bool]:
        """Hold the claim's lock for the block; with `wait=False` yields False (holding nothing) when
        another holder has it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                command = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
                fcntl.fcntl(fd, command, self._flock(uid, fcntl.F_WRLCK))
            except OSError as e:
                if wait or e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                yield False
                return
            yield True
        finally:
            os.close(fd)  # releases the lock
