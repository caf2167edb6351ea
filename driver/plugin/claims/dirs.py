"""Where each prepared claim's directory (region, limits file, cgroup records) is on the host.

A claim's directory is per-boot state (driver/fsutil.py): a reboot voids it with the checkpoint's boot id.
So it lives under the run directory (`--run-dir`, default /run/carve, a tmpfs on every distribution), not
under the plugin directory on the kubelet's disk: creating and removing it is most of a prepare's system
CPU on ext4 and next to nothing on tmpfs (docs/performance.md). The checkpoint stays in the plugin
directory (a DESIGN contract).

Upgrade: a plugin before `--run-dir` put the directories under `<plugin-dir>/claims/`. A claim prepared
there keeps its directory where it is until it is unprepared (its containers have its region and limits
bind-mounted from there; moving them would split the region its containers share and leave their limits
file stale), so every lookup by claim asks the old place first. New claims always go to the run directory.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from driver.plugin.container import regionfs

CLAIMS = "claims"  # <run-dir>/claims/<uid>, and the old <plugin-dir>/claims/<uid>


class ClaimDirs:
    """The claims' directories: `root` for new claims, `legacy` (None: the same place) for old ones."""

    def __init__(self, root: Path, legacy: Path | None = None):
        self.root = Path(root)
        self.legacy = None if legacy is None or Path(legacy) == self.root else Path(legacy)

    def __truediv__(self, uid: str) -> Path:
        """The directory of claim `uid`: where an older plugin made it, if it did, else under `root`.

        An `lstat` of the old place per lookup (no symlink is followed: the plugin directory is root's, but
        a link there would still not be a claim directory); no lookup at all without a legacy root."""
        if self.legacy is not None:
            old = self.legacy / uid
            try:
                if stat.S_ISDIR(os.lstat(old).st_mode):
                    return old
            except OSError:
                pass
        return self.root / uid

    def __repr__(self) -> str:
        return f"ClaimDirs({str(self.root)!r}, legacy={None if self.legacy is None else str(self.legacy)!r})"

    def uids(self) -> Iterator[str]:
        """Every claim directory's name, in either place (recovery removes those of no prepared claim)."""
        seen = set()
        for top in (self.root, self.legacy):
            if top is None or not top.is_dir():
                continue
            for path in top.iterdir():
                if path.name not in seen:
                    seen.add(path.name)
                    yield path.name

    def remove(self, uid: str) -> None:
        """Remove claim `uid`'s directory wherever it is (both, should both exist): region tmpfs first."""
        for top in (self.root, self.legacy):
            if top is None:
                continue
            root = top / uid
            if root.exists():
                regionfs.release_under(root)
                shutil.rmtree(root)  # no fsync: per-boot state (driver/fsutil.py)


def as_dirs(where: Path | str | ClaimDirs) -> ClaimDirs:
    """A claims directory given as a path (one place, no old one) or as ClaimDirs."""
    return where if isinstance(where, ClaimDirs) else ClaimDirs(Path(where))
