"""Bringing the node's prepared state back at plugin start, whatever happened before.

- checkpoint ok: claims left in PrepareStarted are rolled back; spec files and claim directories that
  no claim owns are removed.
- node rebooted (boot id differs): every recorded claim is undone; the kubelet prepares again.
- checkpoint corrupt (moved aside by Checkpoint.load) or missing while spec files exist: the state is
  rebuilt from the CDI directory (a spec file is written only after every other step, so it proves a
  complete prepare) and from the MIG journal (the ids and UUIDs of the instances carve created for them).
- then the MIG journal (driver/plugin/mig/journal.py) is reconciled: an instance recorded for a claim that is
  not prepared now (a crash mid-prepare, whatever became of the checkpoint) is destroyed, after checking its
  UUID; instances no record names are left alone.
- a prepared claim whose CDI spec is missing is logged; the kubelet's next prepare writes it again.
Never raises for bad state: the plugin must not crash-loop on its own files.
"""

from __future__ import annotations

import logging
import re

from driver import names
from driver.fsutil import ensure_private_dir
from driver.plugin.claims.preparer import Preparer
from driver.plugin.logfmt import event
from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    STATE_STARTED,
    ClaimRecord,
    DeviceRecord,
    MigRecord,
)

log = logging.getLogger(__name__)

_SHARE_SUFFIX = re.compile(
    r"^(?P<device>.+?)-(?P<share>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)


def recover(preparer: Preparer) -> str:
    """Load the checkpoint into `preparer.state` and repair the node; returns the checkpoint status."""
    ensure_private_dir(preparer.settings.plugin_dir)
    preparer.specs.ensure()
    with preparer.node_lock.hold():
        loaded = preparer.checkpoint.load()
        preparer.state = {}
        if loaded.status == "corrupt":
            event(
                log,
                logging.ERROR,
                "checkpoint.corrupt",
                path=str(preparer.checkpoint.path),
                error=loaded.detail,
                moved_to=str(loaded.moved_to) if loaded.moved_to else None,
                action="rebuilding state from the CDI directory and NVML",
            )
            _rebuild(preparer)
        elif loaded.status == "rebooted":
            event(
                log,
                logging.WARNING,
                "checkpoint.rebooted",
                detail=loaded.detail,
                claims=sorted(loaded.claims),
                action="prepared state of the previous boot is void",
            )
            for record in loaded.claims.values():
                preparer.state[record.uid] = record
                preparer._undo(record, inject=False)
        elif loaded.status == "missing" and preparer.specs.claim_uids():
            event(
                log,
                logging.WARNING,
                "checkpoint.missing",
                path=str(preparer.checkpoint.path),
                action="rebuilding state from the CDI directory and NVML",
            )
            _rebuild(preparer)
        else:
            preparer.state = dict(loaded.claims)
            for record in list(preparer.state.values()):
                if record.state != STATE_STARTED:
                    continue
                # A claim whose cross-process lock is held is being prepared by another plugin process (a
                # rolling update) between its two checkpoint records: it is not a crash's leftover. Only
                # tried: waiting for it under the node lock would deadlock with its PrepareCompleted.
                with preparer.claim_files.hold(record.uid, wait=False) as ours:
                    if not ours:
                        event(log, logging.INFO, "prepare.in-flight", uid=record.uid, action="left to it")
                        continue
                    event(
                        log,
                        logging.WARNING,
                        "prepare.rollback",
                        claim=f"{record.namespace}/{record.name}",
                        uid=record.uid,
                        devices=[d.device for d in record.devices],
                        reason="interrupted before PrepareCompleted",
                    )
                    preparer._undo(record, inject=False)
        _reconcile_journal(preparer)
        _remove_strays(preparer)
        preparer._save()
        event(log, logging.INFO, "checkpoint.loaded", status=loaded.status, claims=len(preparer.state))
        return loaded.status


def _remove_strays(preparer: Preparer) -> None:
    for uid in preparer.specs.claim_uids() - set(preparer.state):
        preparer.specs.remove(uid)
        event(log, logging.WARNING, "cdi.stray-removed", uid=uid)
    # Both places: the run directory and the plugin directory where a plugin before --run-dir put them.
    for uid in list(preparer.claims_dir.uids()):
        if uid not in preparer.state:
            preparer.remove_claim_dir(uid)
            event(log, logging.WARNING, "claimdir.stray-removed", uid=uid)
    for record in preparer.state.values():
        if not preparer.specs.path(record.uid).exists():
            event(
                log,
                logging.WARNING,
                "cdi.missing",
                uid=record.uid,
                path=str(preparer.specs.path(record.uid)),
                action="written again at the kubelet's next prepare of the claim",
            )


def _rebuild(preparer: Preparer) -> None:
    catalog = preparer.catalog()
    for uid in sorted(preparer.specs.claim_uids()):
        try:
            # inside the try: a truncated or empty spec file raises JSONDecodeError, a ValueError
            doc = preparer.specs.read(uid)
            devices = [
                _device_record(uid, d["name"], catalog, preparer.settings.node_name) for d in doc["devices"]
            ]
        except (KeyError, TypeError, ValueError) as e:
            event(
                log,
                logging.ERROR,
                "cdi.unreadable",
                uid=uid,
                error=f"{type(e).__name__}: {e}",
                action="spec removed",
            )
            preparer.specs.remove(uid)
            continue
        # MIG ids come from the journal (_reconcile_journal), never from whatever is at the placement now.
        # Namespace and name are not in the spec; the kubelet's next call carries them.
        preparer.state[uid] = ClaimRecord(
            uid=uid, namespace="", name="", state=STATE_COMPLETED, devices=devices
        )
        event(log, logging.WARNING, "claim.rebuilt", uid=uid, devices=[d.device for d in devices])


def _reconcile_journal(preparer: Preparer) -> None:
    """Destroy the instances recorded for claims that are not prepared; fill in ids of prepared ones."""
    for entry in preparer.migs.journal.entries():
        owner = preparer.state.get(entry.claim)
        mig = next(
            (
                d.mig
                for d in (owner.devices if owner else [])
                if d.mig and d.mig.gpu_uuid == entry.gpu_uuid and d.mig.start == entry.start
            ),
            None,
        )
        if mig is not None:
            if mig.uuid is None and entry.uuid is not None:  # a rebuilt record
                mig.gpu_instance_id = entry.gpu_instance_id
                mig.compute_instance_id = entry.compute_instance_id
                mig.uuid = entry.uuid
            continue
        event(
            log,
            logging.WARNING,
            "mig.orphan",
            uid=entry.claim,
            gpu=entry.gpu_uuid,
            profile=entry.profile,
            start=entry.start,
            mig=entry.uuid,
            state=entry.state,
            action="destroying: created by carve for a claim that is not prepared",
        )
        try:
            preparer.migs.destroy(entry)
        except Exception as e:  # NVML trouble must not crash-loop the plugin; the entry stays for next time
            event(
                log,
                logging.ERROR,
                "mig.orphan-destroy-failed",
                uid=entry.claim,
                mig=entry.uuid,
                error=f"{type(e).__name__}: {e}",
            )


def _device_record(uid: str, cdi_name: str, catalog: dict, pool: str) -> DeviceRecord:
    prefix = f"{uid}-"
    if not cdi_name.startswith(prefix):
        raise ValueError(f"device {cdi_name!r} does not start with the claim UID")
    rest = cdi_name[len(prefix) :]
    m = _SHARE_SUFFIX.match(rest)
    device, share = (m.group("device"), m.group("share")) if m else (rest, None)
    known = catalog.get(device)
    mig = None
    if known and known.is_mig:
        mig = MigRecord(
            gpu_uuid=known.gpu_uuid, profile=str(known.profile), start=int(known.placement_start or 0)
        )
    return DeviceRecord(
        request_names=[],  # unknown after a rebuild; empty means "all requests" to the kubelet
        pool=pool,
        device=device,
        share_id=share,
        cdi_ids=[f"{names.CDI_KIND}={cdi_name}"],
        type=known.type if known else "",
        gpu_uuid=known.gpu_uuid if known else "",
        mig=mig,
    )
