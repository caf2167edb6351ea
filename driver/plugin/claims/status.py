"""The claim's `status.devices` for this driver (DRAResourceClaimDeviceStatus, GA in 1.37): what a user
sees with `kubectl get resourceclaim -o yaml` instead of `exec`.

One entry per prepared device (driver, pool, device, shareID) with two conditions:
- `Ready` True, reason `Prepared`: the CDI spec is written, the container can start;
- `Enforced`: how the share is held, True with reason `Limiter` (soft slices, slots: memory and cores
  by the limiter), `MigIsolation` (a MIG instance: hardware), `Exclusive` (a whole GPU), False with
  `TimeSliced` (no quota) or `AdminAccess` (no quota, by design);
and `data` (apiVersion gpu.carve.dev/v1alpha1, kind DeviceStatus): strategy (the device type), gpuUUID,
migUUID, memoryLimitBytes and coresLimitPercent (where a quota applies), adminAccess.

Written through the status subresource with the claim's resourceVersion; a Conflict re-reads and retries.
A write after prepare starts from the claim the prepare read (no second read of the claim; a copy that
changed since is a Conflict, which re-reads).
At unprepare our entries are removed (the claim being gone is fine). The API server checks each entry
against the allocation and, with granular status authorization (1.36+), the writer's permission on
`resourceclaims/driver` for this driver (helm/carve/templates/claimstatus-rbac.yaml).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from driver import names
from driver.cluster.base import Conflict, NotFound
from driver.limits import ClaimLimits
from driver.plugin.claims.plan import ClaimPlan, ClaimRef
from driver.plugin.logfmt import event
from driver.plugin.state.checkpoint import ClaimRecord

log = logging.getLogger(__name__)

DATA_API_VERSION = f"{names.DRIVER_NAME}/v1alpha1"
DATA_KIND = "DeviceStatus"
ATTEMPTS = 4
# How long a report may wait for the kubelet's calls in flight to end before it goes out anyway: under a
# steady stream of prepares a report lags by at most this (docs/performance.md, fourth pass).
YIELD_S = 0.5


def _condition(type_: str, ok: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }


def _enforcement(device_type: str, admin: bool) -> tuple[bool, str, str]:
    if admin:
        return (
            False,
            "AdminAccess",
            "admin access: no quota, no limiter; the device is shared with its claims",
        )
    if device_type in (names.TYPE_VGPU, names.TYPE_SLOT):
        return True, "Limiter", "memory and compute limits are enforced by carve's limiter"
    if device_type == names.TYPE_MPS:
        # the GPU is shared with the other mps claims: not "Exclusive", and MPS, not the limiter, sets the SMs
        return (
            True,
            "MpsClientLimits",
            "an MPS client: memory and SM limits are enforced by the GPU's MPS server and carve's limiter",
        )
    if device_type == names.TYPE_MIG:
        return True, "MigIsolation", "a MIG instance: memory and compute isolated by the hardware"
    if device_type == names.TYPE_TIMESLICE:
        return False, "TimeSliced", "time-sliced: no memory or compute quota"
    return True, "Exclusive", "the whole GPU is this claim's"


def device_statuses(
    plan: ClaimPlan, record: ClaimRecord, limits: ClaimLimits | None, now: str | None = None
) -> list[dict[str, Any]]:
    """The status.devices entries of one prepared claim (pure)."""
    now = now or datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    per_gpu = {d.uuid: d for d in limits.devices} if limits else {}
    out = []
    for p, rec in zip(plan.devices, record.devices, strict=True):
        data: dict[str, Any] = {
            "apiVersion": DATA_API_VERSION,
            "kind": DATA_KIND,
            "strategy": p.device.type,
            "gpuUUID": p.device.gpu_uuid,
        }
        if rec.mig and rec.mig.uuid:
            data["migUUID"] = rec.mig.uuid
        limit = per_gpu.get(p.device.gpu_uuid) if p.device.is_limited and not p.admin else None
        if limit is not None:
            data["memoryLimitBytes"] = limit.memory_bytes
            # An MPS share's SMs are MPS's to limit (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, its consumed cores):
            # its limits file holds 0 there, which would read as the whole GPU.
            cores = p.consumed.get("cores", 0) if p.device.is_mps else limit.cores_percent
            data["coresLimitPercent"] = cores if 0 < cores < 100 else 100
        if p.admin:
            data["adminAccess"] = True
        ok, reason, message = _enforcement(p.device.type, p.admin)
        entry: dict[str, Any] = {
            "driver": names.DRIVER_NAME,
            "pool": p.pool,
            "device": p.device.name,
            "conditions": [
                _condition("Ready", True, "Prepared", "prepared on the node; the container can start", now),
                _condition("Enforced", ok, reason, message, now),
            ],
            "data": data,
        }
        if p.share_id:
            entry["shareID"] = p.share_id
        out.append(entry)
    return out


def merged(existing: list[dict], ours: list[dict]) -> list[dict]:
    """Other drivers' entries kept in place, ours replaced."""
    keep = [e for e in existing if e.get("driver") != names.DRIVER_NAME]
    return keep + ours


class ClaimStatusWriter:
    """Writes (and clears) this driver's status.devices entries with retry on conflict."""

    def __init__(self, cluster, attempts: int = ATTEMPTS, sleep: Callable[[float], None] | None = None):
        self.cluster = cluster
        self.attempts = attempts
        self.sleep = sleep or time.sleep
        # uid -> the claim as the API server answered our last write of its entries: a clear starts from
        # it instead of reading the claim again (one round trip at unprepare, not two). A copy that changed
        # since is a Conflict, which re-reads. It always holds our entries, so a clear from it always
        # writes: it never decides "nothing to clear" from a copy. Dropped at the clear.
        self._written: dict[str, dict] = {}

    def write(self, ref: ClaimRef, entries: list[dict], claim: dict | None = None) -> bool:
        """`claim`: the claim as just read (at prepare), tried first instead of reading it again."""
        return self._update(ref, lambda existing: merged(existing, entries), "write", claim)

    def clear(self, ref: ClaimRef, claim: dict | None = None) -> bool:
        """`claim`: the claim as read at its prepare, whose report never went out (StatusQueue): entries of
        ours it lacks were never written, since only this process's report would have written them."""
        known = self._written.pop(ref.uid, None) or claim
        return self._update(ref, lambda existing: merged(existing, []), "clear", known)

    def _update(
        self,
        ref: ClaimRef,
        change: Callable[[list[dict]], list[dict]],
        what: str,
        known: dict | None = None,
    ) -> bool:
        delay = 0.05
        for attempt in range(1, self.attempts + 1):
            claim, known = known, None  # the copy given is for the first attempt only
            from_copy = claim is not None
            if claim is None:
                try:
                    claim = self.cluster.get_resource_claim(ref.namespace, ref.name)
                except NotFound:
                    return False  # deleted: nothing to report on
            if (claim.get("metadata") or {}).get("uid") != ref.uid:
                return False  # a new claim under the old name: not ours to touch
            status = dict(claim.get("status") or {})
            existing = list(status.get("devices") or [])
            wanted = change(existing)
            if sorted(map(repr, wanted)) == sorted(map(repr, existing)):
                return True
            if wanted:
                status["devices"] = wanted
            else:
                status.pop("devices", None)
            body = {**claim, "status": status}
            try:
                stored = self.cluster.update_resource_claim_status(body)
                if what == "write":
                    self._written[ref.uid] = stored
                else:
                    self._written.pop(ref.uid, None)
                event(
                    log,
                    logging.INFO,
                    f"claim-status.{what}",
                    claim=f"{ref.namespace}/{ref.name}",
                    uid=ref.uid,
                )
                return True
            except NotFound:
                return False
            except Conflict:
                # A copy gone stale is no contention: read at once. A fresh read that conflicts is.
                if attempt < self.attempts and not from_copy:
                    self.sleep(delay)
                    delay *= 2
        event(log, logging.WARNING, "claim-status.conflict", uid=ref.uid, attempts=self.attempts)
        return False


class KubeletCalls:
    """The kubelet's prepare and unprepare calls in flight. A burst of prepares shares one interpreter
    with the status reports, and a report through the API client costs as much CPU as a prepare: the
    reports wait for the burst to end (at most YIELD_S), so the kubelet's answers do not pay for them."""

    def __init__(self) -> None:
        self._n = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        with self._cond:
            self._n += 1
        try:
            yield
        finally:
            with self._cond:
                self._n -= 1
                if self._n == 0:
                    self._cond.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Until no call is in flight or `timeout_s` passed; True when none is."""
        with self._cond:
            # A timeout of 0 or less waits not at all (Condition.wait_for): a report past its yield goes now.
            return self._cond.wait_for(lambda: self._n == 0, timeout_s)


class StatusQueue:
    """Claim status reports off the kubelet's path: one thread applies them in order, latest per claim wins.

    A report is two API round trips (read, write; one where a copy of the claim is at hand: a write after
    prepare starts from the claim the prepare read, a clear from what our write returned; a clear replacing
    a write never sent, none), made under no lock of the preparer, so a prepare answers
    the kubelet without waiting for them (docs/performance.md). Per claim the order is kept: a clear queued
    behind a write replaces it (the claim is gone before its report went out). A report is not durable: a
    plugin that crashes before sending it leaves the claim without status.devices, as one that crashed
    between the checkpoint and the status write always did; the claim itself is prepared.
    """

    def __init__(
        self,
        writer: ClaimStatusWriter,
        name: str = "claim-status",
        calls: KubeletCalls | None = None,
        yield_s: float = YIELD_S,
    ):
        self.writer = writer
        self.calls = calls
        self.yield_s = yield_s
        # uid -> (ref, entries or None for a clear, the claim as read at prepare or None, when queued)
        self._pending: dict[str, tuple[ClaimRef, list[dict] | None, dict | None, float]] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def write(self, ref: ClaimRef, entries: list[dict], claim: dict | None = None) -> None:
        """`claim`: the claim as the prepare read it (ClaimStatusWriter.write)."""
        self._put(ref, entries, claim)

    def clear(self, ref: ClaimRef) -> None:
        self._put(ref, None, None)

    def _put(self, ref: ClaimRef, entries: list[dict] | None, claim: dict | None) -> None:
        with self._cond:
            replaced = self._pending.pop(ref.uid, None)  # re-inserted last: dict order is the send order
            if entries is None and replaced is not None:
                # A clear replacing a report that never went out starts from that report's claim (a write's:
                # as read at its prepare; a clear's: what it carried): a claim prepared and unprepared within
                # one burst costs no API call at all.
                claim = replaced[2]
            self._pending[ref.uid] = (ref, entries, claim, time.monotonic())
            self._cond.notify()

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued report was sent (or given up); False when `timeout_s` ran out first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float) -> None:
        """Flush for up to `timeout_s` (the plugin's stop passes its grace period), then stop the thread once
        what is still queued was sent."""
        self.flush(timeout_s)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed and not self._pending:
                    return
                queued_at = next(iter(self._pending.values()))[3]
            if self.calls is not None:
                # A report yields to the kubelet's calls in flight, up to yield_s after it was queued.
                self.calls.wait_idle(queued_at + self.yield_s - time.monotonic())
            with self._cond:  # this thread alone pops: the queue still holds a report
                uid = next(iter(self._pending))
                ref, entries, claim, _ = self._pending.pop(uid)
                self._busy = True
            try:
                if entries is None:
                    self.writer.clear(ref, claim)
                elif claim is None:
                    self.writer.write(ref, entries)
                else:
                    self.writer.write(ref, entries, claim)
            except Exception as e:  # a report: logged, never the claim's error
                event(
                    log, logging.WARNING, "claim-status.failed", uid=ref.uid, error=f"{type(e).__name__}: {e}"
                )
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
