"""Where each prepared claim's directory (region, limits file, cgroup records) is on the host.

A claim's directory is per-boot state (driver/fsutil.py): a reboot voids it with the checkpoint's boot id.
So it lives under the run directory (`--run-dir`, default /run/carve, a tmpfs on every distribution), not
under the plugin directory on the kubelet's disk: creating and removing it is most of a prepare's system
CPU on ext4 and next to nothing on tmpfs (docs/performance.md). The checkpoint stays in the plugin
directory (a DESIGN contract).

Upgrade: a plugin before `--run-dir` put the directories under `<plugin-dir>/claims/`. A claim prepared
there keeps its directory where it is until it is unprepared (its containers have its region and limits
bind-mounted from there; moving them would split the region its containers share and leave their limits
file stale). New claims always go to the run directory. Which claims are in the old place is read once
(`rescan`: at start, and when the plugin adopts a checkpoint another plugin process wrote, the one way a
claim this process did not prepare appears), not at each lookup: a lookup is on a prepare's hot path.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from driver.plugin.container import regionfs

CLAIMS = "claims"  # <run-dir>/claims/<uid>, and the old <plugin-dir>/claims/<uid>


class ClaimDirs:
    """The claims' directories: `root` for new claims, `legacy` (None: the same place) for old ones."""

    def __init__(self, root: Path, legacy: Path | None = None):
        self.root = Path(root)
        self.legacy = None if legacy is None or Path(legacy) == self.root else Path(legacy)
        self._old: frozenset[str] = frozenset()  # claims whose directory is under `legacy`
        self.rescan()

    def rescan(self) -> None:
        """Read which claims have their directory in the old place (directories only: no symlink is
        followed; the plugin directory is root's, but a link there would still not be a claim directory)."""
        if self.legacy is None:
            return
        try:
            with os.scandir(self.legacy) as entries:
                self._old = frozenset(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            self._old = frozenset()

    def __truediv__(self, uid: str) -> Path:
        """The directory of claim `uid`: where an older plugin made it, if it did, else under `root`."""
        return self.legacy / uid if uid in self._old else self.root / uid

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
        if uid in self._old:
            self._old = self._old - {uid}


def as_dirs(where: Path | str | ClaimDirs) -> ClaimDirs:
    """A claims directory given as a path (one place, no old one) or as ClaimDirs."""
    return where if isinstance(where, ClaimDirs) else ClaimDirs(Path(where))
