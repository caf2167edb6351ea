"""The MIG journal: every MIG instance carve creates, written before and after NVML creates it.

File `<plugin-dir>/mig-journal.json` (0600, written with driver.fsutil.write_atomic, always under the node
lock, read from disk on every use so two plugin processes of a rolling update share it):

    {"version": 1, "instances": [{"claim": "<uid>", "gpu_uuid": "GPU-...", "profile": "1g.10gb", "start": 6,
      "state": "creating" | "created", "gpu_instance_id": 13, "compute_instance_id": 0, "uuid": "MIG-..."}]}

An entry is written as `creating` before the NVML call and completed with the instance's ids and UUID
right after it, and removed once the instance is destroyed. It is carve's proof of ownership, separate from
the checkpoint so that a corrupt checkpoint cannot make carve forget an instance it made: at start every
entry whose claim is not prepared is destroyed (driver/plugin/state/recovery.py). An instance no entry (and no
checkpoint record) names is never reused nor destroyed. A `creating` entry without ids names the instance
at its placement: carve asked NVML for exactly that free placement and crashed before writing the answer.
One entry per (GPU, placement start): two live GPU instances never share a start.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from driver.fsutil import write_atomic
from driver.gpu.model import MigInstance
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

VERSION = 1
FILE_NAME = "mig-journal.json"
CREATING, CREATED = "creating", "created"


@dataclass
class JournalEntry:
    claim: str  # the claim UID the instance was created for
    gpu_uuid: str
    profile: str
    start: int
    state: str = CREATING
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    uuid: str | None = None

    def names(self, inst: MigInstance) -> bool:
        """Whether the live instance `inst` (on this entry's GPU) is the one this entry records."""
        if inst.placement.start != self.start or inst.profile_name != self.profile:
            return False
        if self.uuid is None:  # `creating`: the instance at the placement carve asked for
            return True
        return inst.uuid == self.uuid and inst.gpu_instance_id == self.gpu_instance_id


class MigJournal:
    def __init__(self, path: Path):
        self.path = Path(path)

    def entries(self) -> list[JournalEntry]:
        """Every entry; a corrupt file is moved aside and reported (its instances cannot be proven ours)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != VERSION:
                raise ValueError(f"version: {doc.get('version') if isinstance(doc, dict) else doc!r}")
            return [JournalEntry(**e) for e in doc["instances"]]
        except (ValueError, KeyError, TypeError) as e:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(self.path, aside)
            event(
                log,
                logging.ERROR,
                "mig-journal.corrupt",
                path=str(self.path),
                error=f"{type(e).__name__}: {e}",
                moved_to=str(aside),
                action="MIG instances it named are no longer known as carve's; check nvidia-smi mig -lgi",
            )
            return []

    def _save(self, entries: list[JournalEntry]) -> None:
        doc = {"version": VERSION, "instances": [asdict(e) for e in entries]}
        write_atomic(self.path, (json.dumps(doc, indent=1) + "\n").encode(), mode=0o600)

    def find(self, gpu_uuid: str, start: int) -> JournalEntry | None:
        return next((e for e in self.entries() if e.gpu_uuid == gpu_uuid and e.start == start), None)

    def of_claim(self, claim: str) -> list[JournalEntry]:
        return [e for e in self.entries() if e.claim == claim]

    def intend(self, claim: str, gpu_uuid: str, profile: str, start: int) -> None:
        """Before creating: carve is about to ask NVML for `profile` at `start` on the GPU for `claim`."""
        kept = [e for e in self.entries() if not (e.gpu_uuid == gpu_uuid and e.start == start)]
        self._save([*kept, JournalEntry(claim, gpu_uuid, profile, start)])

    def created(self, claim: str, gpu_uuid: str, inst: MigInstance) -> None:
        """After creating: the instance's ids and UUID; it is destroyed by them, and only if they match."""
        entry = JournalEntry(
            claim,
            gpu_uuid,
            inst.profile_name,
            inst.placement.start,
            CREATED,
            inst.gpu_instance_id,
            inst.compute_instance_id,
            inst.uuid,
        )
        kept = [e for e in self.entries() if not (e.gpu_uuid == gpu_uuid and e.start == entry.start)]
        self._save([*kept, entry])

    def forget(self, gpu_uuid: str, start: int) -> None:
        entries = self.entries()
        kept = [e for e in entries if not (e.gpu_uuid == gpu_uuid and e.start == start)]
        if len(kept) != len(entries):
            self._save(kept)
