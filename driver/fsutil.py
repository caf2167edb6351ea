"""Durable file operations: the one way carve writes and removes state files.

Checkpoints and CDI specs go through `write_atomic`, so a crash at any instant
leaves either the old content or the new one on disk, never a torn file.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `data` to `path`: temp file in the same directory, fsync, chmod, rename, fsync the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def remove_durable(path: Path) -> bool:
    """Unlink `path` if it exists and make that durable; returns whether something was removed."""
    path = Path(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) if missing and restrict it to the owner (0700)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        os.chmod(path, 0o700)
    return path
