"""Durable file operations: the one way carve writes and removes state files.

Checkpoints and CDI specs go through `write_atomic`, so a crash at any instant
leaves either the old content or the new one on disk, never a torn file.

What fsync adds is survival of a kernel crash or a power loss: a process crash never loses what reached
the page cache. Prepared state (the checkpoint, CDI specs, region and limits files) is per boot: after a
reboot the checkpoint's boot id differs and every prepared claim is void anyway (device nodes, MIG
instances and /var/run/cdi are gone), and a checkpoint torn by the power loss takes the corrupt path,
rebuilding from the (empty) CDI directory. So those writes skip fsync (PER_BOOT), which is most of a
prepare's latency on a slow disk (docs/reliability.md); what must survive a reboot (partitioning.json,
the MIG journal, MIG modes) stays durable.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PER_BOOT = False  # the `durable` argument for state that a reboot voids


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, durable: bool = True) -> None:
    """Write `data` to `path`: temp file in the same directory, fsync, chmod, rename, fsync the directory.

    `durable=False` leaves out the two fsyncs, for state of this boot only (PER_BOOT below): the rename
    still makes every reader, a crashed and restarted plugin included, see the old content or the new.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def remove_durable(path: Path, durable: bool = True) -> bool:
    """Unlink `path` if it exists and make that durable; returns whether something was removed."""
    path = Path(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    if durable:
        fsync_dir(path.parent)
    return True


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) if missing and restrict it to the owner (0700)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        os.chmod(path, 0o700)
    return path
