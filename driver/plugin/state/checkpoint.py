"""The plugin's checkpoint: which claims are prepared, with what, on this boot of the node.

File `<plugin-dir>/checkpoint.json`:
    {"version": 1, "checksum": "sha256:<hex of the canonical data>", "data": {"bootID": ..., "claims": {...}}}
Written atomically (driver.fsutil.write_atomic). Loading never raises for a bad file: a corrupt or
unreadable checkpoint is moved aside and reported, so the plugin can rebuild its state and keep running.
During a rolling update two plugin processes share the file (one at a time, under the node lock):
`reload_if_changed` lets each adopt what the other wrote instead of overwriting it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from driver.fsutil import fsync_dir, write_atomic

VERSION = 1
STATE_STARTED = "PrepareStarted"
STATE_COMPLETED = "PrepareCompleted"
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


@dataclass
class MigRecord:
    """A MIG instance a claim uses: enough to find it again (placement) and to destroy it (ids)."""

    gpu_uuid: str
    profile: str
    start: int
    gpu_instance_id: int | None = None  # known once created
    uuid: str | None = None
    compute_instance_id: int | None = None


@dataclass
class DeviceRecord:
    request_names: list[str]
    pool: str
    device: str
    share_id: str | None
    cdi_ids: list[str]
    type: str = ""
    gpu_uuid: str = ""
    mig: MigRecord | None = None
    admin: bool = False  # adminAccess: no quota, no limiter, no MIG instance of its own (claims/admin.py)


@dataclass
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: str
    devices: list[DeviceRecord] = field(default_factory=list)


@dataclass
class Loaded:
    """Outcome of reading the checkpoint. status: ok | missing | corrupt | rebooted."""

    claims: dict[str, ClaimRecord]
    status: str
    detail: str = ""
    moved_to: Path | None = None


def read_boot_id(path: Path = BOOT_ID_FILE) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _canonical(data: dict) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _checksum(data: dict) -> str:
    return "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()


def claim_from_json(uid: str, raw: dict) -> ClaimRecord:
    devices = []
    for d in raw.get("devices", []):
        mig = d.get("mig")
        devices.append(
            DeviceRecord(
                request_names=list(d["request_names"]),
                pool=d["pool"],
                device=d["device"],
                share_id=d.get("share_id"),
                cdi_ids=list(d["cdi_ids"]),
                type=d.get("type", ""),
                gpu_uuid=d.get("gpu_uuid", ""),
                mig=MigRecord(**mig) if mig else None,
                admin=d.get("admin") is True,
            )
        )
    if raw["state"] not in (STATE_STARTED, STATE_COMPLETED):
        raise ValueError(f"claims.{uid}.state: unknown state {raw['state']!r}")
    return ClaimRecord(
        uid=uid, namespace=raw["namespace"], name=raw["name"], state=raw["state"], devices=devices
    )


def claim_to_json(claim: ClaimRecord) -> dict:
    out = asdict(claim)
    out.pop("uid")
    return out


class Checkpoint:
    def __init__(self, path: Path, boot_id: str):
        self.path = Path(path)
        self.boot_id = boot_id
        self._stamp: tuple[int, int, int] | None = None  # the file as this process last wrote or read it

    def _file_stamp(self) -> tuple[int, int, int] | None:
        # Every save is a rename onto the path, so a write by anyone changes the inode (and the mtime).
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def encode(self, claims: dict[str, ClaimRecord]) -> bytes:
        data = {
            "bootID": self.boot_id,
            "claims": {uid: claim_to_json(c) for uid, c in sorted(claims.items())},
        }
        return (
            json.dumps({"version": VERSION, "checksum": _checksum(data), "data": data}, indent=1) + "\n"
        ).encode()

    def save(self, claims: dict[str, ClaimRecord]) -> None:
        write_atomic(self.path, self.encode(claims), mode=0o600)
        self._stamp = self._file_stamp()

    def reload_if_changed(self) -> Loaded | None:
        """The file's content when someone else replaced it since our last save or load, else None.

        A bad file is reported (status corrupt), never moved aside: the caller keeps its state.
        """
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return None
        return self.load(move_aside=False)

    def load(self, move_aside: bool = True) -> Loaded:
        self._stamp = self._file_stamp()
        try:
            raw_bytes = self.path.read_bytes()
        except FileNotFoundError:
            return Loaded({}, "missing")
        except OSError as e:
            return self._move_aside(f"unreadable: {e}") if move_aside else Loaded({}, "corrupt", str(e))
        try:
            doc = json.loads(raw_bytes)
            if not isinstance(doc, dict):
                raise ValueError("top level is not an object")
            if doc.get("version") != VERSION:
                raise ValueError(f"version: {doc.get('version')!r} is not {VERSION}")
            data = doc["data"]
            if doc.get("checksum") != _checksum(data):
                raise ValueError("checksum: does not match the data")
            claims = {uid: claim_from_json(uid, raw) for uid, raw in data["claims"].items()}
        except (ValueError, KeyError, TypeError) as e:
            why = f"{type(e).__name__}: {e}"
            return self._move_aside(why) if move_aside else Loaded({}, "corrupt", why)
        if data.get("bootID") != self.boot_id:
            # Prepared state does not survive a reboot: device nodes, MIG instances and /var/run/cdi are gone.
            return Loaded(
                claims, "rebooted", detail=f"checkpoint boot id {data.get('bootID')!r}, node {self.boot_id!r}"
            )
        return Loaded(claims, "ok")

    def _move_aside(self, why: str) -> Loaded:
        aside = self.path.with_name(
            f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        )
        try:
            os.replace(self.path, aside)
            fsync_dir(self.path.parent)
        except OSError as e:
            return Loaded({}, "corrupt", detail=f"{why}; could not move it aside: {e}")
        return Loaded({}, "corrupt", detail=why, moved_to=aside)
