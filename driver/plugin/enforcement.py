"""The plugin's check that the limiter really holds: what NVML sees against what the claims' regions say.

The limiter runs inside the tenant's processes, so a process can escape it (a static binary, a musl image, a
program that talks to the kernel driver directly, a root process that rewrites its region's counters). On
every GPU that carries soft slices or slots, the region watcher asks NVML for the compute processes and their
memory (`nvml_processes`) and `cross_check` finds:
 - unenforced processes: a process on the GPU that no claim's region knows (it did not load the limiter);
 - claims over quota: the memory NVML counts for a claim's processes exceeds its quota (from the plugin's
   limits file) by more than a margin (a CUDA context holds memory the limiter does not count).
`Enforcer` reports each finding once, from the second pass in a row that sees it (a Warning Event on the
claim, through the cluster interface, and a log line), keeps the last findings for the metrics
(`carve_unenforced_processes`, `carve_claim_memory_over_quota_bytes`), and with `kill` (--kill-unenforced)
SIGKILLs the processes.
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from driver import names
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

MIB = 1 << 20
CONTEXT_ALLOWANCE_BYTES = (
    512 * MIB
)  # per process: a CUDA context's memory, which NVML counts and carve does not
MARGIN_FRACTION = 20  # plus 1/20 (5%) of the quota
REASON_UNENFORCED = "UnenforcedGpuProcess"
REASON_OVER_QUOTA = "GpuMemoryOverQuota"


@dataclass(frozen=True)
class GpuProcess:
    pid: int  # host pid, as NVML reports it
    used_bytes: int  # NVML's usedGpuMemory (0 when NVML cannot tell)


@dataclass(frozen=True)
class ClaimView:
    """One limited claim, from the plugin's records (checkpoint, limits file) and its region's slots."""

    uid: str
    namespace: str
    name: str
    gpus: tuple[str, ...]  # GPU UUID per device (checkpoint)
    memory_limits: tuple[int, ...]  # bytes per device (limits file); 0 = none
    pids: frozenset[int]  # host pids of the processes its region knows
    unresolved: bool = False  # a process of its region has no known host pid yet: its GPUs are not judged


@dataclass(frozen=True)
class Unenforced:
    gpu_uuid: str
    pid: int
    used_bytes: int
    claim_uid: str | None  # the claim whose container runs it, when the process's environment tells


@dataclass(frozen=True)
class OverQuota:
    claim_uid: str
    gpu_uuid: str
    used_bytes: int
    limit_bytes: int
    pids: tuple[int, ...]


@dataclass
class Findings:
    unenforced: list[Unenforced] = field(default_factory=list)
    over_quota: list[OverQuota] = field(default_factory=list)
    soft_gpus: tuple[str, ...] = ()  # the GPUs checked
    kills: int = 0  # processes killed since the plugin started


def allowed_bytes(limit: int, processes: int, allowance: int = CONTEXT_ALLOWANCE_BYTES) -> int:
    """What NVML may show for a claim's processes on a GPU before the claim counts as over its quota."""
    return limit + limit // MARGIN_FRACTION + processes * allowance


def cross_check(
    claims: Iterable[ClaimView],
    processes: Mapping[str, list[GpuProcess]],
    owner: Callable[[int], str | None] = lambda _pid: None,
    allowance: int = CONTEXT_ALLOWANCE_BYTES,
) -> Findings:
    """The pure rule: `processes` are NVML's compute processes per GPU UUID; `owner` maps a pid to a claim."""
    claims = list(claims)
    known: dict[str, set[int]] = {}
    for c in claims:
        for gpu in c.gpus:
            if gpu:
                known.setdefault(gpu, set()).update(c.pids)
    found = Findings(soft_gpus=tuple(sorted(known)))
    # a process whose host pid is not known yet would look unknown to NVML's pid: judge its GPUs next pass
    pending = {gpu for c in claims if c.unresolved for gpu in c.gpus}
    for gpu in found.soft_gpus:
        if gpu in pending:
            continue
        for p in processes.get(gpu, []):
            if p.pid not in known[gpu]:
                found.unenforced.append(Unenforced(gpu, p.pid, p.used_bytes, owner(p.pid)))
    for c in claims:
        for gpu, limit in zip(c.gpus, c.memory_limits, strict=False):
            mine = [p for p in processes.get(gpu, []) if p.pid in c.pids]
            used = sum(p.used_bytes for p in mine)
            if limit and mine and used > allowed_bytes(limit, len(mine), allowance):
                found.over_quota.append(
                    OverQuota(c.uid, gpu, used, limit, tuple(sorted(p.pid for p in mine)))
                )
    return found


def claim_of_process(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The claim uid in the process's CARVE_REGION (/var/run/carve/<uid>/region), None when it has none.

    The environment is what the container started with (the plugin's CDI env); a process may have changed
    its own, so this only names whom to tell, never whom to trust.
    """
    try:
        with open(Path(proc_root) / str(pid) / "environ", "rb") as f:
            environ = f.read(1 << 20)
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        key, _, value = entry.partition(b"=")
        if key == names.ENV_REGION.encode():
            parts = Path(value.decode(errors="replace")).parts
            return parts[-2] if len(parts) >= 2 else None
    return None


def nvml_processes(gpu_uuids: Iterable[str]) -> dict[str, list[GpuProcess]]:
    """NVML's compute processes per GPU, through the NVML the plugin loaded for its inventory (the real
    library, or the fake one with --gpus fake:...). A GPU NVML cannot answer for is left out (not checked)."""
    import pynvml  # only where a GPU is checked: the pure rules above need no NVML

    out: dict[str, list[GpuProcess]] = {}
    for uuid in gpu_uuids:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError as e:
            event(log, logging.DEBUG, "enforcement.nvml-unavailable", gpu=uuid, error=str(e))
            continue
        out[uuid] = [GpuProcess(int(p.pid), int(p.usedGpuMemory or 0)) for p in running]
    return out


class EventSink(Protocol):
    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...


def claim_event(node: str, namespace: str, name: str, uid: str, reason: str, message: str) -> dict[str, Any]:
    """A core/v1 Warning Event about a ResourceClaim."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "name": name,
            "namespace": namespace,
            "uid": uid,
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "carve-kubelet-plugin", "host": node},
        "reportingComponent": f"{names.DRIVER_NAME}/kubelet-plugin",
        "reportingInstance": node,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class Enforcer:
    """Reports (and with `kill`, kills) what cross_check finds; each finding is reported once."""

    def __init__(
        self,
        node: str = "",
        events: EventSink | None = None,
        kill: bool = False,
        processes: Callable[[Iterable[str]], dict[str, list[GpuProcess]]] = nvml_processes,
        proc_root: Path = Path("/proc"),
        allowance: int = CONTEXT_ALLOWANCE_BYTES,
        killer: Callable[[int], None] = lambda pid: os.kill(pid, signal.SIGKILL),
    ):
        self.node = node
        self.events = events
        self.kill = kill
        self._processes = processes
        self._proc = Path(proc_root)
        self._allowance = allowance
        self._killer = killer
        self._previous: set[tuple[str, ...]] = set()  # findings of the last pass
        self._reported: set[tuple[str, ...]] = set()
        self.findings = Findings()

    def check(self, claims: list[ClaimView], refs: Mapping[str, tuple[str, str]]) -> Findings:
        """One pass; `refs`: claim uid -> (namespace, name) of every prepared claim (for Events)."""
        gpus = sorted({g for c in claims for g in c.gpus if g})
        if not gpus:
            self.findings = Findings(kills=self.findings.kills)
            return self.findings
        found = cross_check(
            claims, self._processes(gpus), lambda pid: claim_of_process(pid, self._proc), self._allowance
        )
        found.kills = self.findings.kills
        # A finding counts from its second pass in a row: a process that just created its CUDA context shows
        # in NVML a moment before its limiter takes a slot in the region (at its first allocation or launch).
        seen: set[tuple[str, ...]] = set()
        confirmed = Findings(soft_gpus=found.soft_gpus, kills=found.kills)
        for u in found.unenforced:
            key = ("unenforced", u.gpu_uuid, str(u.pid))
            seen.add(key)
            if key not in self._previous:
                continue
            confirmed.unenforced.append(u)
            if key not in self._reported:
                self._report_unenforced(u, refs)
            if self.kill and self._kill(u.pid, "unenforced", u.gpu_uuid):
                confirmed.kills += 1
        for o in found.over_quota:
            key = ("over-quota", o.claim_uid, o.gpu_uuid)
            seen.add(key)
            if key not in self._previous:
                continue
            confirmed.over_quota.append(o)
            if key not in self._reported:
                self._report_over_quota(o, refs)
            for pid in o.pids if self.kill else ():
                confirmed.kills += self._kill(pid, "over-quota", o.gpu_uuid)
        self._previous = seen
        # a finding that went away is reported again if it comes back
        self._reported = (
            {k for k in self._reported if k in seen}
            | {("unenforced", u.gpu_uuid, str(u.pid)) for u in confirmed.unenforced}
            | {("over-quota", o.claim_uid, o.gpu_uuid) for o in confirmed.over_quota}
        )
        self.findings = confirmed
        return confirmed

    def _report_unenforced(self, u: Unenforced, refs: Mapping[str, tuple[str, str]]) -> None:
        event(
            log,
            logging.WARNING,
            "enforcement.unenforced-process",
            gpu=u.gpu_uuid,
            pid=u.pid,
            used_bytes=u.used_bytes,
            uid=u.claim_uid,
        )
        message = (
            f"process {u.pid} uses GPU {u.gpu_uuid} ({u.used_bytes} bytes) without the carve limiter "
            "(static binary, musl image, or the limiter removed): its memory and compute are not limited"
            + ("; killed (--kill-unenforced)" if self.kill else "")
        )
        self._event(u.claim_uid, REASON_UNENFORCED, message, refs)

    def _report_over_quota(self, o: OverQuota, refs: Mapping[str, tuple[str, str]]) -> None:
        event(
            log,
            logging.WARNING,
            "enforcement.over-quota",
            uid=o.claim_uid,
            gpu=o.gpu_uuid,
            used_bytes=o.used_bytes,
            limit_bytes=o.limit_bytes,
            pids=list(o.pids),
        )
        message = (
            f"NVML counts {o.used_bytes} bytes on GPU {o.gpu_uuid} for processes {list(o.pids)}, over the "
            f"claim's quota of {o.limit_bytes} bytes" + ("; killed (--kill-unenforced)" if self.kill else "")
        )
        self._event(o.claim_uid, REASON_OVER_QUOTA, message, refs)

    def _event(self, uid: str | None, reason: str, message: str, refs: Mapping[str, tuple[str, str]]) -> None:
        if self.events is None or uid is None or uid not in refs:
            return
        namespace, name = refs[uid]
        try:
            self.events.create_event(namespace, claim_event(self.node, namespace, name, uid, reason, message))
        except Exception as e:  # an Event is a courtesy: the API server being away must not stop the check
            event(
                log,
                logging.WARNING,
                "enforcement.event-failed",
                uid=uid,
                reason=reason,
                error=f"{type(e).__name__}: {e}",
            )

    def _kill(self, pid: int, why: str, gpu: str) -> bool:
        try:
            self._killer(pid)
        except ProcessLookupError:
            return False
        except OSError as e:
            event(log, logging.ERROR, "enforcement.kill-failed", pid=pid, why=why, gpu=gpu, error=e.strerror)
            return False
        event(log, logging.WARNING, "enforcement.killed", pid=pid, why=why, gpu=gpu)
        return True
