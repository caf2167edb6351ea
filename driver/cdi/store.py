"""The CDI spec directory: one transient spec file per prepared claim, written atomically.

The directory is also evidence: after a lost checkpoint, the spec files say which claims were prepared
(see driver/plugin/state/recovery.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from driver import names
from driver.fsutil import PER_BOOT, remove_durable, write_atomic

_PREFIX = f"{names.CDI_VENDOR}-{names.CDI_CLASS}_"
_SUFFIX = ".json"


class SpecStore:
    """Spec files of this driver in one CDI directory (other files there are left alone)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def ensure(self) -> None:
        # CDI dirs are read by the container runtime (root); 0755 like /etc/cdi.
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, claim_uid: str) -> Path:
        return self.directory / names.cdi_spec_file_name(claim_uid)

    def write(self, claim_uid: str, doc: dict) -> Path:
        path = self.path(claim_uid)
        # Compact: json's C encoder serves only calls without indent, and the spec is written per prepare
        # (`jq . <file>` reads it as well).
        data = json.dumps(doc, separators=(",", ":")) + "\n"
        write_atomic(path, data.encode(), mode=0o644, durable=PER_BOOT)
        return path

    def read(self, claim_uid: str) -> dict | None:
        try:
            return json.loads(self.path(claim_uid).read_text())
        except FileNotFoundError:
            return None

    def remove(self, claim_uid: str) -> bool:
        return remove_durable(self.path(claim_uid), durable=PER_BOOT)

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a spec file here."""
        if not self.directory.is_dir():
            return set()
        return {
            p.name[len(_PREFIX) : -len(_SUFFIX)]
            for p in self.directory.iterdir()
            if p.name.startswith(_PREFIX) and p.name.endswith(_SUFFIX)
        }
