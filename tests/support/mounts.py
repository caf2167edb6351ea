"""Unmounting what a test's plugin left mounted: each claim's region directory is a tmpfs the plugin mounts
when it may (root; driver/plugin/container/regionfs.py), and a test that never unprepares leaves it."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

MNT_DETACH = 2


def unmount_under(root: Path) -> int:
    """Lazily unmount every mount point under `root`, deepest first; how many."""
    prefix = str(Path(root).resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)
        point = line.split()[4].encode().decode("unicode_escape")
        if point.startswith(prefix):
            points.append(point)
    libc = ctypes.CDLL(None, use_errno=True)
    done = 0
    for point in sorted(points, key=len, reverse=True):
        done += libc.umount2(os.fsencode(point), MNT_DETACH) == 0
    return done
