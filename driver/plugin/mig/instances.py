"""MIG instances a claim owns: created and destroyed only through carve's records (migjournal.py).

Rules:
- create: an instance already at the allocated placement is this claim's only if the journal records it for
  this claim (a retry after a crash, or a claim whose CDI spec is written again); recorded for another claim
  it is that claim's and never shared; recorded nowhere it is someone else's: the claim fails, the instance
  is neither used nor destroyed. Otherwise the journal records the intent, NVML creates, the journal records
  the ids and UUID.
- destroy: each instance the records name for the claim, by its recorded GPU/compute instance ids, after
  checking that the live instance at those ids still has the recorded UUID (NVML re-checks under its lock).
  Other claims' instances on the same GPU are not looked at.
- a whole GPU (any non-MIG device of a MIG-capable GPU) needs MIG mode off: switched off at prepare when no
  instance is on the GPU, else the claim fails with the reason. modes.py turns MIG back on once idle.
Called with the preparer's node lock held.
"""

from __future__ import annotations

import logging
from typing import Protocol

from driver.gpu.model import MigInstance
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef, PrepareError
from driver.plugin.logfmt import event
from driver.plugin.mig.journal import CREATED, JournalEntry, MigJournal
from driver.plugin.state.checkpoint import ClaimRecord

log = logging.getLogger(__name__)


class MigOps(Protocol):
    """What prepare needs from MIG management (driver/plugin/mig/ops.py on NVML; a dict in unit tests)."""

    def create(self, gpu_uuid: str, profile: str, start: int) -> MigInstance:
        """A new instance; an instance already at the placement is an error (never reused)."""
        ...

    def destroy(
        self, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None, uuid: str
    ) -> None:
        """Destroy the instance at those ids if its MIG device still has `uuid`; else raise."""
        ...

    def instances(self, gpu_uuid: str) -> list[MigInstance]: ...

    def set_mig_mode(self, gpu_uuid: str, enabled: bool) -> tuple[bool, bool | None]: ...


def needs_mig_off(device: NodeDevice) -> bool:
    """CUDA can use the device only with its GPU's MIG mode off: every non-MIG device of a MIG-capable GPU."""
    return device.mig_capable and not device.is_mig


def _label(inst: MigInstance) -> str:
    return inst.uuid or f"gi{inst.gpu_instance_id}"


class MigKeeper:
    def __init__(self, ops: MigOps, journal: MigJournal):
        self.ops = ops
        self.journal = journal

    def _instances(self, what: str, gpu_uuid: str) -> list[MigInstance]:
        try:
            return self.ops.instances(gpu_uuid)
        except Exception as e:
            raise PrepareError(f"{what}: listing the GPU's MIG instances: {type(e).__name__}: {e}") from None

    # --- prepare ---------------------------------------------------------------------------------------

    def create(self, ref: ClaimRef, d: NodeDevice) -> MigInstance:
        profile, start = str(d.profile), int(d.placement_start or 0)
        what = f"{ref}: device {d.name}: MIG instance {profile} at placement {start} on {d.gpu_uuid}"
        live = [i for i in self._instances(what, d.gpu_uuid) if i.placement.start == start]
        entry = self.journal.find(d.gpu_uuid, start)
        if live:
            inst = live[0]
            if entry and entry.names(inst) and entry.claim == ref.uid:
                self.journal.created(ref.uid, d.gpu_uuid, inst)  # a retry of this claim: ours, kept
                event(
                    log,
                    logging.INFO,
                    "mig.adopted",
                    uid=ref.uid,
                    device=d.name,
                    mig=inst.uuid,
                    gi=inst.gpu_instance_id,
                    reason="recorded for this claim",
                )
                return inst
            if entry and entry.names(inst):
                raise PrepareError(
                    f"{what}: {inst.uuid} is held by claim {entry.claim}; "
                    "retried once that claim is unprepared"
                )
            raise PrepareError(
                f"{what}: {inst.profile_name} instance {_label(inst)} (GPU instance "
                f"{inst.gpu_instance_id}) is already there and carve did not create it; carve never "
                "reuses a MIG instance it did not record: destroy it (nvidia-smi mig -dci/-dgi) or free "
                "the device"
            )
        if entry:  # the instance it named is gone (destroyed by hand, a GPU reset): a stale record
            event(
                log,
                logging.WARNING,
                "mig.record-stale",
                uid=entry.claim,
                gpu=d.gpu_uuid,
                start=start,
                mig=entry.uuid,
            )
        self.journal.intend(ref.uid, d.gpu_uuid, profile, start)
        try:
            inst = self.ops.create(d.gpu_uuid, profile, start)
        except Exception as e:
            # The `creating` entry stays: the rollback destroys whatever NVML may have left at the placement.
            raise PrepareError(f"{what}: {type(e).__name__}: {e}") from None
        self.journal.created(ref.uid, d.gpu_uuid, inst)
        event(
            log,
            logging.INFO,
            "mig.ready",
            uid=ref.uid,
            device=d.name,
            mig=inst.uuid,
            gi=inst.gpu_instance_id,
            ci=inst.compute_instance_id,
        )
        return inst

    def whole_gpu(self, ref: ClaimRef, gpu_uuid: str) -> None:
        """MIG mode off for a device CUDA uses as a whole GPU; never over MIG instances."""
        what = f"{ref}: GPU {gpu_uuid}"
        live = self._instances(what, gpu_uuid)
        if live:
            raise PrepareError(
                f"{what}: the claim needs the whole GPU but MIG instances are on it "
                f"({', '.join(_label(i) for i in live)}); retried once they are gone"
            )
        try:
            current, _pending = self.ops.set_mig_mode(gpu_uuid, False)  # only reads when already off
        except Exception as e:
            raise PrepareError(f"{what}: switching MIG mode off: {type(e).__name__}: {e}") from None
        if current:
            raise PrepareError(
                f"{what}: the claim needs the whole GPU; switching MIG mode off is pending "
                "(the GPU is in use or needs a reset)"
            )

    # --- unprepare -------------------------------------------------------------------------------------

    def destroy_claims(self, record: ClaimRecord) -> None:
        """Destroy the instances carve's records name for this claim, and no other.

        The journal's entries of the claim; for a claim prepared before the journal existed, the instances
        its checkpoint record names by ids and UUID.
        """
        entries = self.journal.of_claim(record.uid)
        journaled = {(e.gpu_uuid, e.start) for e in entries}
        for d in record.devices:
            m = d.mig
            if m and (m.gpu_uuid, m.start) not in journaled and m.gpu_instance_id is not None and m.uuid:
                entries.append(
                    JournalEntry(
                        record.uid,
                        m.gpu_uuid,
                        m.profile,
                        m.start,
                        CREATED,
                        m.gpu_instance_id,
                        m.compute_instance_id,
                        m.uuid,
                    )
                )
        for entry in entries:
            self.destroy(entry)

    def destroy(self, entry: JournalEntry) -> None:
        """Destroy the live instance a record names (checked by ids and UUID), then forget the record."""
        live = self.ops.instances(entry.gpu_uuid)
        ours = [i for i in live if entry.names(i)]
        if ours:
            inst = ours[0]
            self.ops.destroy(entry.gpu_uuid, inst.gpu_instance_id, inst.compute_instance_id, inst.uuid)
            event(
                log,
                logging.INFO,
                "mig.destroyed",
                uid=entry.claim,
                mig=inst.uuid,
                gi=inst.gpu_instance_id,
                ci=inst.compute_instance_id,
            )
        else:
            other = [_label(i) for i in live if i.placement.start == entry.start]
            event(
                log,
                logging.WARNING,
                "mig.not-found",
                uid=entry.claim,
                gpu=entry.gpu_uuid,
                start=entry.start,
                recorded=entry.uuid,
                found=other or None,
                action="nothing destroyed" + ("; the instance there is not carve's" if other else ""),
            )
        self.journal.forget(entry.gpu_uuid, entry.start)
