"""Where the plugin's claims directory lives, as the kernel names it: the anchor of the limiter's trust.

The limiter trusts a claim's limits file only when its limits directory is the plugin's own mount of
`<claims dir>/<claim uid>/limits` (native/src/limits.c, docs/limiter.md "Trust"). It recognises that mount in
its /proc/self/mountinfo by the mount's device and root (the path inside the filesystem the bind mount
comes from); the plugin passes its claims directory's device and root in the CDI environment:

    CARVE_LIMITS_SOURCE=<major>:<minor>:<root>

both as mountinfo writes them (root with mountinfo's octal escapes for space, tab, newline and backslash).
The plugin computes them from its own mountinfo: the mount holding the claims directory (the longest mount
point above it, the last such entry when mounts are stacked) gives the device and the root of its mount
point, and the claims directory's path below that mount point is appended. A plugin in a container with
the host's plugin directory mounted by hostPath sees the same device and filesystem path as the runtime's
bind mount into a tenant's container, so the two agree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
_ESCAPE = re.compile(r"\\([0-3][0-7]{2})")


class MountError(Exception):
    """The claims directory's mount could not be told (no mountinfo, no entry above the path)."""


@dataclass(frozen=True)
class MountEntry:
    major: int
    minor: int
    root: str  # unescaped
    mount_point: str  # unescaped


def unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m[1], 8)), field)


def escape(path: str) -> str:
    return "".join(f"\\{ord(ch):03o}" if ch in " \t\n\\" else ch for ch in path)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """mountinfo lines: id parent major:minor root mount-point options [optional...] - fstype source opts."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 6 or ":" not in fields[2]:
            continue
        major, _, minor = fields[2].partition(":")
        if not (major.isdigit() and minor.isdigit()):
            continue
        out.append(MountEntry(int(major), int(minor), unescape(fields[3]), unescape(fields[4])))
    return out


def _below(path: str, mount_point: str) -> str | None:
    """`path` relative to `mount_point` ("" for itself), None when it is not below it."""
    if mount_point == "/":
        return path.lstrip("/")
    if path == mount_point:
        return ""
    if path.startswith(mount_point + "/"):
        return path[len(mount_point) + 1 :]
    return None


def limits_source(claims_dir: Path, mountinfo: Path = MOUNTINFO) -> str:
    """CARVE_LIMITS_SOURCE for the plugin's claims directory `claims_dir` (see the module's doc)."""
    path = os.path.realpath(claims_dir)
    try:
        entries = parse_mountinfo(Path(mountinfo).read_text())
    except OSError as e:
        raise MountError(f"{mountinfo}: {e.strerror}") from None
    best: tuple[int, MountEntry, str] | None = None
    for entry in entries:  # later entries are mounted on top of earlier ones: >= keeps the last
        rel = _below(path, entry.mount_point)
        if rel is not None and (best is None or len(entry.mount_point) >= best[0]):
            best = (len(entry.mount_point), entry, rel)
    if best is None:
        raise MountError(f"{mountinfo}: no mount holds {path}")
    _, entry, rel = best
    root = entry.root.rstrip("/") + "/" + rel if rel else entry.root
    root = "/" + root.strip("/") if root.strip("/") else "/"
    return f"{entry.major}:{entry.minor}:{escape(root)}"
