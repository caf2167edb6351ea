"""Whether another process could take an flock(2) on a file right now: the way a second plugin process
would find the node lock. Asked from a fresh interpreter, since flock locks belong to open file
descriptions and the asking process may hold one of its own on the same file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# exit 3: the lock is held elsewhere; 0: taken (and dropped with the process); 1: the file cannot be opened
_PROBE = textwrap.dedent(
    """
    import fcntl, os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(3)
    """
)


def other_process_gets_lock(path: Path | str) -> bool:
    """True when a new process opens `path` and takes an exclusive flock on it without waiting."""
    rc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], timeout=60, capture_output=True, text=True)
    assert rc.returncode in (0, 3), rc.stderr  # 1: the path has no lock file
    return rc.returncode == 0
