"""The plugin's checkpoint: which claims are prepared, with what, on this boot of the node.

Two files in the plugin directory, so that one prepare or unprepare writes a constant amount however many
claims the node holds (docs/reliability.md has the figures):
- `checkpoint.json`, the snapshot, written atomically (driver.fsutil.write_atomic):
    {"version": 2, "checksum": "sha256:<hex of the canonical data>",
     "data": {"bootID": ..., "seq": <last log record folded in>, "claims": {...}}}
- `checkpoint.log`, one JSON record per line, appended per change (no fsync: the checkpoint is this boot's
  state, see driver/fsutil.py):
    {"seq": 7, "op": "put"|"del", "uid": ..., "claim": {...}|null, "checksum": "sha256:..."}
  Records with seq <= the snapshot's are already in it (a crash between writing a snapshot and emptying the
  log leaves such records behind). A torn last line is a write that never returned, so it is dropped; a bad
  line before the last is corruption. Once the log holds more records than max(COMPACT_MIN, claims), the
  next save folds it into a new snapshot: that O(claims) write happens once per O(claims) changes.
Each claim records its `pods` (the UIDs of the pods in its status.reservedFor at prepare: the NVML
cross-check gives a GPU process to a claim by its cgroup's pod).
Version 1 (a snapshot without `seq` or `pods`, and no log) is read too (its claims with no pods: the region
watcher reads them from the API server) and rewritten as version 2 by the first full save (recovery does
one at every start), with fixtures of both in tests/fixtures/formats/.
Loading never raises for a bad file: a corrupt checkpoint is moved aside and reported, so the plugin can
rebuild its state and keep running. During a rolling update two plugin processes share the files (one at
a time, under the node lock): `reload_if_changed` lets each adopt what the other wrote, not overwrite it.
When the other process only appended to the log since our last save or load, only the appended records are
read and applied to the caller's state (a whole load parses up to COMPACT_MIN log records: issue 30's
sixth pass measured it as most of a prepare's CPU with two processes on one directory).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from driver.fsutil import PER_BOOT, fsync_dir, write_atomic

VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: one snapshot file, rewritten whole on every change
COMPACT_MIN = 256
MAX_UID_BYTES = 128  # a claim UID names files (its CDI spec: a prefix, the UID, .json) under NAME_MAX
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
    pods: list[str] = field(default_factory=list)  # UIDs of the pods the claim was reserved for at prepare


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


def _plain_name(what: str, value: object) -> str:
    """A claim UID names files (claims/<uid>, the CDI spec) that recovery removes as root: a plain name."""
    if not isinstance(value, str) or not value or value in (".", "..") or "/" in value or "\0" in value:
        raise ValueError(f"{what}: {value!r} is not a plain file name")
    if len(value.encode(errors="replace")) > MAX_UID_BYTES:
        raise ValueError(f"{what[:60]}...: longer than {MAX_UID_BYTES} bytes (an API server UID has 36)")
    return value


def _typed(what: str, value: object, kind: type) -> object:
    # kind is dict, list or str: no bool is one (bool subclasses int only), so no bool check is needed here
    if not isinstance(value, kind):
        raise ValueError(f"{what}: {type(value).__name__} where {getattr(kind, '__name__', kind)} belongs")
    return value


def claim_from_json(uid: str, raw: dict) -> ClaimRecord:
    """One claim of a checkpoint; ValueError (naming the field) for anything a save could not have written."""
    _plain_name(f"claims.{uid!r}", uid)
    _typed(f"claims.{uid}", raw, dict)
    devices = []
    for i, d in enumerate(_typed(f"claims.{uid}.devices", raw.get("devices", []), list)):
        at = f"claims.{uid}.devices[{i}]"
        _typed(at, d, dict)
        for key in ("request_names", "cdi_ids"):
            if not all(isinstance(x, str) for x in _typed(f"{at}.{key}", d.get(key), list)):
                raise ValueError(f"{at}.{key}: not a list of strings")
        for key in ("pool", "device"):
            _typed(f"{at}.{key}", d.get(key), str)
        if d.get("share_id") is not None:
            _typed(f"{at}.share_id", d["share_id"], str)
        mig = d.get("mig")
        if mig is not None:
            _typed(f"{at}.mig", mig, dict)
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
    for key in ("namespace", "name"):
        _typed(f"claims.{uid}.{key}", raw.get(key), str)
    if raw["state"] not in (STATE_STARTED, STATE_COMPLETED):
        raise ValueError(f"claims.{uid}.state: unknown state {raw['state']!r}")
    pods = raw.get("pods", [])
    if not isinstance(pods, list) or not all(isinstance(p, str) for p in pods):
        raise ValueError(f"claims.{uid}.pods: not a list of pod UIDs")
    return ClaimRecord(
        uid=uid, namespace=raw["namespace"], name=raw["name"], state=raw["state"], devices=devices, pods=pods
    )


def _mig_to_json(mig: MigRecord | None) -> dict | None:
    if mig is None:
        return None
    return {
        "gpu_uuid": mig.gpu_uuid,
        "profile": mig.profile,
        "start": mig.start,
        "gpu_instance_id": mig.gpu_instance_id,
        "uuid": mig.uuid,
        "compute_instance_id": mig.compute_instance_id,
    }


def claim_to_json(claim: ClaimRecord) -> dict:
    """The claim as the checkpoint stores it: dataclasses.asdict's layout without the uid, built by hand
    (asdict deep-copies field by field, a tenth of a prepare's Python; a test compares the two)."""
    return {
        "namespace": claim.namespace,
        "name": claim.name,
        "state": claim.state,
        "devices": [
            {
                "request_names": list(d.request_names),
                "pool": d.pool,
                "device": d.device,
                "share_id": d.share_id,
                "cdi_ids": list(d.cdi_ids),
                "type": d.type,
                "gpu_uuid": d.gpu_uuid,
                "mig": _mig_to_json(d.mig),
                "admin": d.admin,
            }
            for d in claim.devices
        ],
        "pods": list(claim.pods),
    }


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read as any known version; the message names the file and field."""


def _log_record(seq: int, op: str, uid: str, claim: dict | None) -> bytes:
    body = {"seq": seq, "op": op, "uid": uid, "claim": claim}
    return json.dumps({**body, "checksum": _checksum(body)}, separators=(",", ":")).encode() + b"\n"


def _parse_log(raw: bytes, name: str) -> list[dict]:
    """The log's records in order; a torn last line is dropped, any other bad line raises CheckpointError."""
    lines = raw.split(b"\n")
    torn_tail = lines[-1] != b""  # the last write did not finish its newline
    records = []
    for i, line in enumerate(lines[:-1] if not torn_tail else lines):
        last = i == len(lines) - 1 or (not torn_tail and i == len(lines) - 2)
        try:
            rec = json.loads(line)
            body = {k: rec[k] for k in ("seq", "op", "uid", "claim")}
            if rec.get("checksum") != _checksum(body) or body["op"] not in ("put", "del"):
                raise ValueError("checksum or op")
        except (ValueError, KeyError, TypeError) as e:
            if last:
                break  # a write that never returned: nobody was told it happened
            raise CheckpointError(f"{name} line {i + 1}: {type(e).__name__}: {e}") from None
        records.append(body)
    return records


class Checkpoint:
    def __init__(self, path: Path, boot_id: str):
        self.path = Path(path)
        self.log_path = self.path.with_suffix(".log")
        self.boot_id = boot_id
        self._stamp: tuple | None = None  # the files as this process last wrote or read them
        self._seq = 0  # the last sequence number written or read
        self._log_records = 0  # records in the log now
        self._snapshot_seq = 0
        self._torn = False  # an append failed and could not be cut back: the next save writes a snapshot
        # Bytes of the log that the state as of our last save or load holds; None: unknown (a failed
        # append, a corrupt file), so the next reload reads everything.
        self._log_end: int | None = None

    def _file_stamp(self) -> tuple | None:
        # A snapshot is a rename onto the path (new inode); a log append grows the log.
        try:
            st = os.stat(self.path)
            snap = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            snap = None
        try:
            lt = os.stat(self.log_path)
            log_part = (lt.st_ino, lt.st_size)
        except FileNotFoundError:
            log_part = None
        return None if snap is None and log_part is None else (snap, log_part)

    def encode(self, claims: dict[str, ClaimRecord], seq: int | None = None) -> bytes:
        data = {
            "bootID": self.boot_id,
            "seq": self._seq if seq is None else seq,
            "claims": {uid: claim_to_json(c) for uid, c in sorted(claims.items())},
        }
        return (
            json.dumps({"version": VERSION, "checksum": _checksum(data), "data": data}, separators=(",", ":"))
            + "\n"
        ).encode()

    def save(self, claims: dict[str, ClaimRecord], changed: Iterable[str] | None = None) -> None:
        """Make `claims` durable. With `changed` (the uids whose record was added, changed or removed), one
        log record each is appended; without it, or when the log is long, a new snapshot is written."""
        changed = None if changed is None else list(changed)
        if changed is None or self._torn or self._log_records + len(changed) > max(COMPACT_MIN, len(claims)):
            self._compact(claims)
            return
        out = b""
        for uid in changed:
            self._seq += 1
            claim = claims.get(uid)
            if claim is None:
                out += _log_record(self._seq, "del", uid, None)
            else:
                out += _log_record(self._seq, "put", uid, claim_to_json(claim))
        if out:
            # No fsync: the checkpoint is this boot's state (driver/fsutil.py, PER_BOOT).
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                start = os.fstat(fd).st_size
                view = memoryview(out)
                while view:
                    view = view[os.write(fd, view) :]
                # The caller synced under the node lock before changing its state, so the log up to `start`
                # is in it; anything else (a writer we did not see) makes the next reload a whole one.
                self._log_end = start + len(out) if self._log_end == start else None
            except OSError:
                self._log_end = None
                # A full disk (ENOSPC) or EIO mid-append: the torn bytes must not stay, or the next record
                # would be glued to them and the log unreadable from there on. Cut back to where this append
                # began (truncating frees space, so it works on a full disk); if even that fails, the next
                # save writes a whole snapshot instead. These records are not durable: the caller is told.
                self._seq -= len(changed)
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    self._torn = True
                raise
            finally:
                os.close(fd)
                self._stamp = self._file_stamp()  # ours, written or failed: not another process's change
            self._log_records += len(changed)
        else:
            self._stamp = self._file_stamp()

    def _compact(self, claims: dict[str, ClaimRecord]) -> None:
        # The snapshot first (it names the last seq it holds), then the empty log: a crash in between
        # leaves log records the snapshot already holds, which load skips by seq.
        write_atomic(self.path, self.encode(claims), mode=0o600, durable=PER_BOOT)
        self._snapshot_seq = self._seq
        if self._log_records or self.log_path.exists():
            write_atomic(self.log_path, b"", mode=0o600, durable=PER_BOOT)
        self._log_records = 0
        self._torn = False
        self._log_end = 0
        self._stamp = self._file_stamp()

    def reload_if_changed(self, current: dict[str, ClaimRecord] | None = None) -> Loaded | None:
        """The files' content when someone else changed them since our last save or load, else None.

        `current`: the claims as of our last save or load (the caller's state). When the other writer only
        appended log records, they are applied to a copy of it instead of reading both files whole.
        A bad file is reported (status corrupt), never moved aside: the caller keeps its state.
        """
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return None
        if current is not None:
            claims = self._apply_tail(stamp, current)
            if claims is not None:
                return Loaded(claims, "ok")
        return self.load(move_aside=False)

    def _apply_tail(self, stamp: tuple, current: dict[str, ClaimRecord]) -> dict[str, ClaimRecord] | None:
        """`current` with the log records appended after the ones we know, or None when the change is not
        only such an append (a new snapshot, a rewritten log, a torn or bad record, a gap in seq): the
        caller then loads the files whole, which judges them."""
        old, end = self._stamp, self._log_end
        if old is None or end is None or stamp[0] != old[0] or stamp[1] is None or old[1] is None:
            return None
        (ino, size), (old_ino, _old_size) = stamp[1], old[1]
        if ino != old_ino or size <= end:
            return None
        try:
            with open(self.log_path, "rb") as f:
                if os.fstat(f.fileno()).st_ino != ino:
                    return None
                f.seek(end)
                raw = f.read(size - end)
        except OSError:
            return None
        if len(raw) != size - end or not raw.endswith(b"\n"):
            return None
        try:
            records = _parse_log(raw, self.log_path.name)
        except CheckpointError:
            return None
        if len(records) != raw.count(b"\n"):
            return None  # a bad last line, dropped by the parser: the whole load reports it
        seq = self._seq
        claims = dict(current)
        try:
            for rec in records:
                if rec["seq"] != seq + 1:
                    return None
                seq = rec["seq"]
                if rec["op"] == "put":
                    claims[rec["uid"]] = claim_from_json(rec["uid"], rec["claim"])
                else:
                    claims.pop(rec["uid"], None)
        except (CheckpointError, ValueError, KeyError, TypeError):
            return None
        self._seq = seq
        self._log_records += len(records)
        self._log_end = size
        self._stamp = stamp
        return claims

    def load(self, move_aside: bool = True) -> Loaded:
        self._stamp = self._file_stamp()
        self._log_end = None  # known again only once the files were read as ok
        try:
            raw_bytes = self.path.read_bytes()
        except FileNotFoundError:
            raw_bytes = None
        except OSError as e:
            return self._move_aside(f"unreadable: {e}") if move_aside else Loaded({}, "corrupt", str(e))
        try:
            log_bytes = self.log_path.read_bytes()
        except FileNotFoundError:
            log_bytes = b""
        except OSError as e:
            return self._move_aside(f"unreadable: {e}") if move_aside else Loaded({}, "corrupt", str(e))
        if raw_bytes is None and not log_bytes.strip():
            self._seq = self._snapshot_seq = self._log_records = 0
            return Loaded({}, "missing")  # the log's end stays unknown until a snapshot is written
        try:
            claims, boot_id = self._decode(raw_bytes, log_bytes)
        except (CheckpointError, ValueError, KeyError, TypeError) as e:
            why = f"{type(e).__name__}: {e}"
            return self._move_aside(why) if move_aside else Loaded({}, "corrupt", why)
        if boot_id != self.boot_id:
            # Prepared state does not survive a reboot: device nodes, MIG instances and /var/run/cdi are gone.
            return Loaded(claims, "rebooted", detail=f"checkpoint boot id {boot_id!r}, node {self.boot_id!r}")
        self._log_end = len(log_bytes)
        return Loaded(claims, "ok")

    def _decode(self, raw_bytes: bytes | None, log_bytes: bytes) -> tuple[dict[str, ClaimRecord], str | None]:
        if raw_bytes is None:
            raise CheckpointError(f"{self.path.name}: missing while {self.log_path.name} has records")
        doc = json.loads(raw_bytes)
        if not isinstance(doc, dict):
            raise CheckpointError(f"{self.path.name}: top level is not an object")
        if doc.get("version") not in READABLE_VERSIONS:
            raise CheckpointError(
                f"{self.path.name}: version: {doc.get('version')!r} is not one of {list(READABLE_VERSIONS)}"
            )
        data = doc["data"]
        if doc.get("checksum") != _checksum(data):
            raise CheckpointError(f"{self.path.name}: checksum: does not match the data")
        claims = {uid: claim_from_json(uid, raw) for uid, raw in data["claims"].items()}
        seq = int(data.get("seq", 0)) if doc["version"] >= 2 else 0
        self._snapshot_seq = seq
        records = _parse_log(log_bytes, self.log_path.name) if doc["version"] >= 2 else []
        for rec in records:
            if rec["seq"] <= seq:
                continue  # already folded into the snapshot
            if rec["seq"] != seq + 1:
                raise CheckpointError(f"{self.log_path.name}: seq {rec['seq']} follows {seq}")
            seq = rec["seq"]
            if rec["op"] == "put":
                claims[rec["uid"]] = claim_from_json(rec["uid"], rec["claim"])
            else:
                claims.pop(rec["uid"], None)
        self._seq = seq
        self._log_records = len(records)
        return claims, data.get("bootID")

    def _move_aside(self, why: str) -> Loaded:
        stamp = f"corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        aside = self.path.with_name(f"{self.path.name}.{stamp}")
        try:
            if self.path.exists():
                os.replace(self.path, aside)
            if self.log_path.exists():
                os.replace(self.log_path, self.log_path.with_name(f"{self.log_path.name}.{stamp}"))
            fsync_dir(self.path.parent)
        except OSError as e:
            return Loaded({}, "corrupt", detail=f"{why}; could not move it aside: {e}")
        self._seq = self._snapshot_seq = self._log_records = 0
        return Loaded({}, "corrupt", detail=why, moved_to=aside)
