"""Prepare and unprepare claims: the node-side steps, in an order that survives a crash at any point.

prepare (per claim, under its claim locks: in process and across processes, state/locks.py):
  under the node lock:
  1. record PrepareStarted in the checkpoint (with the MIG placements it is about to create)
  2. create MIG instances at their allocated placements, each recorded in the MIG journal before and after
     (driver/plugin/mig/journal.py); an instance already at the placement is an error unless the journal
     names it as this claim's (a retry), never adopted otherwise
  without it (the claim's own files; other claims' prepares overlap here):
  3. write the claim directory: the shared region and the limits file (soft slices and slots)
  4. write the CDI spec (edits from driver/plugin/container/edits.py claim_edits, host files checked again)
  under the node lock again:
  5. record PrepareCompleted, before the kubelet is answered
A failure undoes what was done; a crash leaves PrepareStarted, which the next start rolls back
(driver/plugin/state/recovery.py). unprepare runs the same steps backwards and is a no-op for unknown claims;
it destroys the instances the journal records for that claim, by their recorded ids, after checking that
the live instance still has the recorded UUID. A PrepareCompleted claim whose CDI spec vanished is prepared
again (its recorded instances kept), never answered from the checkpoint alone.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from driver import names
from driver.cdi.spec import claim_spec
from driver.cdi.store import SpecStore
from driver.cluster.base import ClusterError, NotFound
from driver.gpu.model import MigInstance
from driver.plugin import faults
from driver.plugin.claims.admin import check_admin_namespace, needs_admin
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.dirs import CLAIMS, ClaimDirs
from driver.plugin.claims.enforcement import EnforcementHosts, enforcement_edits
from driver.plugin.claims.plan import (
    ClaimPlan,
    ClaimRef,
    PrepareError,
    claim_limits,
    plan_claim,
)
from driver.plugin.container.claimfiles import LimiterMissing, write_claim_files
from driver.plugin.container.edits import (
    ClaimDevice,
    ClaimEdits,
    ClaimFiles,
    DriverFilesError,
    HostLayout,
    claim_edits,
    region_container_path,
)
from driver.plugin.container.enforcement_edits import MpsUserCheck, PartitionHost
from driver.plugin.enforcement.attribution import reserved_pods
from driver.plugin.enforcement.regions import ClaimRegion, claim_runtime
from driver.plugin.logfmt import event
from driver.plugin.mig.instances import MigKeeper, MigOps, needs_mig_off
from driver.plugin.mig.journal import FILE_NAME, MigJournal
from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
    MigRecord,
)
from driver.plugin.state.locks import ClaimFileLocks, ClaimLocks, NodeLock

log = logging.getLogger(__name__)
T = TypeVar("T")
# How long a prepare waits for its turn at the local work before it goes on beside the claim holding it
# (Preparer._local_turn): far above a turn's 0.5-1 ms, far below the kubelet's patience.
LOCAL_WORK_WAIT_S = 0.05


class ClaimSource(Protocol):
    def get_resource_claim(self, namespace: str, name: str) -> dict: ...

    def get_namespace(self, name: str) -> dict: ...


@dataclass(frozen=True)
class PreparerSettings:
    node_name: str  # also this node's pool name
    plugin_dir: Path
    cdi_dir: Path
    limiter_dir: Path
    # Per-boot claim directories go under <run_dir>/claims (claims/dirs.py); None: the plugin directory.
    run_dir: Path | None = None


@dataclass(frozen=True)
class Prepared:
    """One claim's answer to the kubelet: its devices, or an error."""

    devices: tuple[DeviceRecord, ...] = ()
    error: str = ""


class Preparer:
    def __init__(
        self,
        settings: PreparerSettings,
        claims: ClaimSource,
        layout: HostLayout,
        mig: MigOps,
        catalog: Callable[[], dict[str, NodeDevice]],
        checkpoint: Checkpoint,
    ):
        self.settings = settings
        self.cluster = claims
        self.layout = layout
        self.mig = mig
        self.catalog = catalog
        self.checkpoint = checkpoint
        self.specs = SpecStore(settings.cdi_dir)
        self.claim_locks = ClaimLocks()
        self.node_lock = NodeLock(Path(settings.plugin_dir) / "plugin.lock")
        self.claim_files = ClaimFileLocks(Path(settings.plugin_dir) / "claims.lock")
        run_dir = settings.plugin_dir if settings.run_dir is None else settings.run_dir
        self.claims_dir = ClaimDirs(Path(run_dir) / CLAIMS, legacy=Path(settings.plugin_dir) / CLAIMS)
        self.migs = MigKeeper(mig, MigJournal(Path(settings.plugin_dir) / FILE_NAME))
        self.state: dict[str, ClaimRecord] = {}
        self.after_unprepare: Callable[[ClaimRecord], None] = lambda _record: None
        # Memory enforcement beyond the limiter (set by the plugin at start, docs/enforcement.md): the host
        # side of the driver-partition hook, and the MPS pipe directory of a GPU (None: no daemon).
        self.partition_host: PartitionHost | None = None
        self.mps_pipe_dir: Callable[[str], Path | None] = lambda _uuid: None
        self.mps_state_dir: Callable[[str], Path | None] = lambda _uuid: None
        self.region_fs = "off"  # each region directory a tmpfs of its own: auto, on, off (regionfs.py)
        self.mps_shm_dir: Path | None = None  # --mps-shm-dir: the daemons' /dev/shm on the host
        self.mps_user_check: MpsUserCheck | None = None  # None: no mps-user hook (no control binary)
        # After a claim is prepared (not answered from the checkpoint): the claim status writer. Its
        # failure is logged, never the claim's error.
        self.after_prepare: Callable[[ClaimPlan, ClaimRecord, object], None] = lambda *_a: None
        # Each limited claim's sharing inputs, kept from its prepare (enforcement/regions.py, claim_runtime).
        self._claim_regions: dict[str, ClaimRegion] = {}
        # One claim's local work (checkpoint records, claim files, CDI spec) at a time in this process
        # (`_local_turn`). The claim read from the API server stays outside it, overlapped.
        self._local_work = threading.Lock()

    # --- the kubelet's two calls -----------------------------------------------------------------------

    def prepare(self, refs: list[ClaimRef]) -> dict[str, Prepared]:
        results = {}
        for ref in refs:
            prepared, error = self._guarded("prepare", ref, self._prepare_one)
            results[ref.uid] = Prepared(error=error) if error else prepared
        return results

    def unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        return {ref.uid: self._guarded("unprepare", ref, self._unprepare_one)[1] for ref in refs}

    def _guarded(self, action: str, ref: ClaimRef, step: Callable[[ClaimRef], T]) -> tuple[T | None, str]:
        """(result, "") or (None, the claim's error): one bad claim never affects the others of a call."""
        who = f"{ref.namespace}/{ref.name}"
        try:
            return step(ref), ""
        except PrepareError as e:
            event(log, logging.WARNING, f"{action}.failed", claim=who, uid=ref.uid, error=str(e))
            return None, str(e)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                return None, self._internal_error(who, ref, e)
            # A full state disk is the operator's to fix, not a bug: one line, no traceback. What this claim
            # had written is rolled back (the checkpoint cuts a torn append back), so the retry starts clean.
            where = e.filename or str(self.claims_dir.root.parent)
            error = f"{ref}: {action}: no space left on the plugin's state filesystem ({where})"
            event(log, logging.WARNING, f"{action}.failed", claim=who, uid=ref.uid, error=error)
            return None, error
        except Exception as e:
            return None, self._internal_error(who, ref, e)

    def _internal_error(self, who: str, ref: ClaimRef, e: Exception) -> str:
        # Called inside the except block, so the traceback is still there to log.
        event(log, logging.ERROR, "internal.error", exc_info=True, claim=who, uid=ref.uid, error=f"{e!r}")
        return f"internal error: {type(e).__name__}: {e}"

    # --- prepare ---------------------------------------------------------------------------------------

    def _prepare_one(self, ref: ClaimRef) -> Prepared:
        with self.claim_locks.hold(ref.uid):
            done = self.state.get(ref.uid)
            if self._answerable(done):
                event(
                    log,
                    logging.INFO,
                    "prepare.cached",
                    claim=f"{ref.namespace}/{ref.name}",
                    uid=ref.uid,
                    devices=[d.device for d in done.devices],
                )
                return Prepared(devices=tuple(done.devices))
            try:
                claim = self.cluster.get_resource_claim(ref.namespace, ref.name)
            except NotFound:
                raise PrepareError(f"{ref}: not found in the API server") from None
            except ClusterError as e:
                raise PrepareError(f"{ref}: reading the claim from the API server: {e}") from None
            plan = plan_claim(ref, claim, self.settings.node_name, self.catalog())
            if needs_admin(plan):
                check_admin_namespace(plan, self._namespace(ref))
            # The node lock is held twice, briefly: to record PrepareStarted (and create MIG instances),
            # then to record PrepareCompleted. The claim's own files and CDI spec are written in between
            # without it, so another plugin process (a rolling update) is not held up by them; the
            # cross-process claim lock keeps that process from rolling this claim back meanwhile.
            with self.claim_files.hold(ref.uid), self._local_turn():
                begun = self._begin(plan, claim)
                if isinstance(begun, Prepared):
                    return begun
                record, instances, limits, runtime = begun
                try:
                    self._write(plan, instances, limits, runtime)
                    self._complete(plan, record, limits)
                except BaseException:
                    # Roll back this claim only; the error goes to the kubelet, which retries later.
                    with self.node_lock.hold():
                        self.sync()
                        self._undo(record, inject=False)
                    raise
            # The status report is two API round trips: made outside the node lock (the claim's own lock
            # still orders it against this claim's unprepare), so concurrent prepares do not queue behind
            # each other's API calls (docs/performance.md).
            try:
                self.after_prepare(plan, record, limits)
            except Exception as e:  # the claim is prepared; its status is a report
                event(
                    log, logging.WARNING, "claim-status.failed", uid=ref.uid, error=f"{type(e).__name__}: {e}"
                )
            return Prepared(devices=tuple(record.devices))

    @contextlib.contextmanager
    def _local_turn(self) -> Iterator[None]:
        """This claim's turn at the local work, waited for at most LOCAL_WORK_WAIT_S.

        The claim files are this boot's (no fsync, a tmpfs on a node), so prepares overlapping their local
        work wait on no disk: they only interleave Python under one interpreter lock, handing it over at
        each of a prepare's 40-odd system calls, which doubled a prepare's CPU with 8 at once
        (docs/performance.md, seventh pass). Taking turns costs the last of 8 about 7 ms; a claim whose
        turn is stuck (a mount that hangs) holds the others up by at most the bounded wait, after which they
        overlap as before."""
        mine = self._local_work.acquire(timeout=LOCAL_WORK_WAIT_S)
        try:
            yield
        finally:
            if mine:
                self._local_work.release()

    def _namespace(self, ref: ClaimRef) -> dict | None:
        try:
            return self.cluster.get_namespace(ref.namespace)
        except NotFound:
            return None
        except ClusterError as e:
            raise PrepareError(f"{ref}: reading namespace {ref.namespace} (admin access): {e}") from None

    def _answerable(self, record: ClaimRecord | None) -> bool:
        """Prepared, and its CDI spec is still there: the checkpoint's answer is the truth."""
        return bool(record and record.state == STATE_COMPLETED and self.specs.path(record.uid).exists())

    def _record(self, plan: ClaimPlan) -> ClaimRecord:
        devices = []
        for p in plan.devices:
            mig = None
            if p.device.is_mig and not p.admin:  # admin: the parent GPU, no instance of its own
                mig = MigRecord(
                    gpu_uuid=p.device.gpu_uuid,
                    profile=str(p.device.profile),
                    start=int(p.device.placement_start or 0),
                )
            devices.append(
                DeviceRecord(
                    request_names=[p.request_name],
                    pool=p.pool,
                    device=p.device.name,
                    share_id=p.share_id,
                    cdi_ids=[names.cdi_device_id(plan.ref.uid, p.device.name, p.share_id)],
                    type=p.device.type,
                    gpu_uuid=p.device.gpu_uuid,
                    mig=mig,
                    admin=p.admin,
                )
            )
        ref = plan.ref
        return ClaimRecord(
            uid=ref.uid, namespace=ref.namespace, name=ref.name, state=STATE_STARTED, devices=devices
        )

    def _begin(self, plan: ClaimPlan, claim: dict):
        """Under the node lock: PrepareStarted, MIG instances, the claim's limits and sharing runtime.

        Returns the checkpoint's answer (Prepared) when another plugin process prepared the claim, else
        (record, MIG instances by device name, limits or None, runtime or None)."""
        ref = plan.ref
        with self.node_lock.hold():
            self.sync()
            leftover = self.state.get(ref.uid)
            if self._answerable(leftover):  # prepared by another plugin process
                return Prepared(devices=tuple(leftover.devices))
            if leftover and leftover.state == STATE_COMPLETED:
                # Its CDI spec vanished: the container could never start. Prepare it again; the MIG
                # journal still names its instances, so they are kept, not recreated.
                event(log, logging.WARNING, "cdi.missing", uid=ref.uid, action="preparing it again")
            elif leftover:  # a PrepareStarted left by a failed attempt (we hold its claim locks): start clean
                self._undo(leftover, inject=False)
            record = self._record(plan)
            record.pods = list(reserved_pods(claim))
            try:
                self.state[ref.uid] = record
                self._save(ref.uid)
                faults.reached("prepare-after-checkpoint-started")

                mig_off = {p.device.gpu_uuid for p in plan.devices if needs_mig_off(p.device) and not p.admin}
                for gpu_uuid in sorted(mig_off):
                    self.migs.whole_gpu(ref, gpu_uuid)
                instances: dict[str, MigInstance] = {}
                for p, rec in zip(plan.devices, record.devices, strict=True):
                    if rec.mig:
                        instances[p.device.name] = inst = self.migs.create(ref, p.device)
                        rec.mig.gpu_instance_id, rec.mig.uuid = inst.gpu_instance_id, inst.uuid
                        rec.mig.compute_instance_id = inst.compute_instance_id
                faults.reached("prepare-after-mig")
                limits = claim_limits(plan, region_container_path(ref.uid))
                # The limits file's runtime (effective shares, high-priority neighbours) comes from the
                # claims prepared or being prepared on this node; the watcher keeps it current afterwards.
                runtime = (
                    None
                    if limits is None
                    else claim_runtime(ref.uid, limits, self.state, self.claims_dir, self._claim_regions)
                )
            except BaseException:
                self._undo(record, inject=False)
                raise
        return record, instances, limits, runtime

    def _write(self, plan: ClaimPlan, instances: dict[str, MigInstance], limits, runtime) -> None:
        """The claim's directory (region, limits file) and its CDI spec: its own files only, written under
        the claim's locks without the node lock."""
        ref = plan.ref
        files = ClaimFiles(self.claims_dir / ref.uid)
        if limits is not None:
            try:
                write_claim_files(
                    files, Path(self.settings.limiter_dir), limits, runtime, region_fs=self.region_fs
                )
            except LimiterMissing as e:
                raise PrepareError(f"{ref}: {e}") from None
        faults.reached("prepare-after-limits")

        devices = []
        for p in plan.devices:
            inst = instances.get(p.device.name)
            devices.append(
                ClaimDevice(
                    names.cdi_device_name(ref.uid, p.device.name, p.share_id),
                    p.device.minor,
                    inst.gpu_instance_id if inst else None,
                    inst.compute_instance_id if inst else None,
                )
            )
        try:
            edits = claim_edits(self.layout, devices, limits, files, self.settings.limiter_dir)
        except DriverFilesError as e:
            raise PrepareError(f"{ref}: {e}") from None
        hosts = EnforcementHosts(
            self.partition_host, self.mps_pipe_dir, self.mps_state_dir, self.mps_shm_dir, self.mps_user_check
        )
        extra = enforcement_edits(plan, files, limits, hosts)
        if extra is not None:
            edits = ClaimEdits(edits.common.merged(extra), edits.devices)
        self.specs.write(ref.uid, claim_spec(ref.uid, edits.devices, edits.common))
        faults.reached("prepare-after-cdi")

    def _complete(self, plan: ClaimPlan, record: ClaimRecord, limits) -> None:
        """Under the node lock: PrepareCompleted, once the claim's files and spec are written."""
        ref = plan.ref
        with self.node_lock.hold():
            self.sync()
            current = self.state.get(ref.uid)
            if current is None or current.state != STATE_STARTED:
                # Only a checkpoint rebuilt by another plugin process (it was corrupt) can get here: we hold
                # the claim's locks, which every other writer of this claim's record takes first.
                raise PrepareError(
                    f"{ref}: its checkpoint record changed while it was prepared "
                    f"({'gone' if current is None else current.state}); the kubelet retries"
                )
            record.state = STATE_COMPLETED
            self.state[ref.uid] = record  # ours: it carries the MIG ids, which a reloaded copy lacks
            self._save(ref.uid)
        event(
            log,
            logging.INFO,
            "prepare.done",
            claim=f"{ref.namespace}/{ref.name}",
            uid=ref.uid,
            devices=[d.device for d in record.devices],
            mig=[r.mig.uuid for r in record.devices if r.mig] or None,
            limits=None if limits is None else [(d.memory_bytes, d.cores_percent) for d in limits.devices],
        )
        faults.reached("prepare-after-checkpoint-completed")

    # --- unprepare -------------------------------------------------------------------------------------

    def _unprepare_one(self, ref: ClaimRef) -> None:
        with self.claim_locks.hold(ref.uid), self.claim_files.hold(ref.uid):
            with self.node_lock.hold():
                self.sync()
                record = self.state.get(ref.uid)
                if record is None:
                    # Unknown claim: nothing to do, but never leave a stray spec behind for it.
                    if self.specs.remove(ref.uid):
                        event(log, logging.WARNING, "unprepare.stray-spec-removed", uid=ref.uid)
                    event(
                        log,
                        logging.INFO,
                        "unprepare.unknown",
                        claim=f"{ref.namespace}/{ref.name}",
                        uid=ref.uid,
                    )
                    return
                self._undo(record, inject=True)
            # The status clear is API round trips: outside the node lock, under the claim's (as at prepare).
            self.after_unprepare(record)
            event(
                log,
                logging.INFO,
                "unprepare.done",
                claim=f"{ref.namespace}/{ref.name}",
                uid=ref.uid,
                devices=[d.device for d in record.devices],
            )

    def _undo(self, record: ClaimRecord, inject: bool) -> None:
        """Remove everything a claim may have: spec, MIG instances, files, checkpoint entry. Idempotent."""
        point = faults.reached if inject else (lambda _p: None)
        self.specs.remove(record.uid)
        point("unprepare-after-cdi")
        self.migs.destroy_claims(record)
        point("unprepare-after-mig")
        self.remove_claim_dir(record.uid)
        self._claim_regions.pop(record.uid, None)
        point("unprepare-after-files")
        if self.state.pop(record.uid, None) is not None:
            self._save(record.uid)
        point("unprepare-after-checkpoint")

    def remove_claim_dir(self, uid: str) -> None:
        self.claims_dir.remove(uid)

    def sync(self) -> None:
        """Adopt the checkpoint another plugin process wrote (rolling update); call with the node lock held.

        Without this, our next save would drop the claims the other process prepared meanwhile.
        """
        loaded = self.checkpoint.reload_if_changed(self.state)
        if loaded is None:
            return
        if loaded.status == "ok":
            event(
                log,
                logging.INFO,
                "checkpoint.reloaded",
                reason="written by another process",
                claims=len(loaded.claims),
            )
            self.state = dict(loaded.claims)
            self.claims_dir.rescan()  # its claims may have their directories where an older plugin puts them
        else:
            event(
                log,
                logging.WARNING,
                "checkpoint.reload-skipped",
                status=loaded.status,
                error=loaded.detail,
                action="keeping the state in memory",
            )

    def _save(self, uid: str | None = None) -> None:
        """Make the state durable: one log record for the claim `uid` changed, else a whole snapshot."""
        self.checkpoint.save(self.state, None if uid is None else [uid])
