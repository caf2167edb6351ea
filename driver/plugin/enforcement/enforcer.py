"""The plugin's check that the limiter really holds: what NVML sees against the claims' quotas and shares.

The limiter runs inside the tenant's processes, so a process can escape it (a static binary, a musl image, a
program that talks to the kernel driver directly, a root process that rewrites its region's counters). On
every GPU that carries soft slices or slots, the region watcher asks NVML for the compute processes and their
memory (`nvml_processes`) and their SM utilization (`nvml_utilization`), finds each process's pod from its
cgroup (attribution.py: the host's word, never the region's), gives each claim the processes of the pods it
is reserved for (`attribute`), and `cross_check` (crosscheck.py) finds:
 - unenforced processes: a process on the GPU whose pod holds no claim of that GPU;
 - claims over quota: the memory NVML counts for a claim's processes (with the limiter or without it: a
   static binary in the claim's pod counts too) exceeds its quota (from the plugin's limits file) by more
   than a margin (a CUDA context holds memory the limiter does not count);
 - unattributed claims: the claim's region reports live processes, NVML shows none of its pods' processes
   on its GPUs (a forged or stale region): reported after UNATTRIBUTED_PASSES passes in a row;
 - each claim's compute sample (`CoreSample`): the SM utilization of its processes on each GPU, and of every
   other process there. `over_share` judges a claim's recent samples against its effective share and core
   policy (from the limits file): over the share by more than a margin in every one of the last
   CORE_WINDOW samples, where the policy did not permit it (`force`; `default` while another process was
   busy on the GPU, as the limiter decides; never `disable` or a claim without a compute limit).
`Enforcer` reports each finding once, from the second pass in a row that sees it (the compute check: once its
window is full), as a Warning Event on the claim (through the cluster interface) and a log line; keeps the
last findings for the metrics (`carve_unenforced_processes`, `carve_claim_memory_over_quota_bytes`,
`carve_claim_sm_over_share_percent`, `carve_claim_unattributed`), and with `kill` (--kill-unenforced) SIGKILLs
the processes: only ever a process whose cgroup, read again right before the signal, is one of the finding's
claim's pods (an unenforced process only when its pod holds a claim on this node; a process of no claim,
the host's own included, is reported, never killed).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from driver.plugin.enforcement.attribution import pidfd_kill, pods_of_processes
from driver.plugin.enforcement.crosscheck import (
    CONTEXT_ALLOWANCE_BYTES,
    CORE_WINDOW,
    POLICY_FORCE,
    ClaimView,
    CoreSample,
    Findings,
    GpuProcess,
    OverQuota,
    OverShare,
    Unenforced,
    attribute,
    cross_check,
    over_share,
)
from driver.plugin.events import claim_event
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

REASON_UNENFORCED = "UnenforcedGpuProcess"
REASON_OVER_QUOTA = "GpuMemoryOverQuota"
REASON_OVER_SHARE = "GpuComputeOverShare"
REASON_UNATTRIBUTED = "GpuProcessesUnattributed"
# Passes in a row a claim's region may report processes the node cannot find on its GPUs before it is
# reported: a process just started (its pod not yet in the claim's reservedFor as the plugin knows it) or
# just gone (its slot not reclaimed yet) is not a finding. The bound keeps "unresolved" from lasting.
UNATTRIBUTED_PASSES = 5


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


def nvml_utilization(gpu_uuids: Iterable[str], since_us: int = 0) -> dict[str, dict[int, int]]:
    """NVML's SM utilization per process (percent of the GPU) per GPU, from the samples since `since_us`
    (wall-clock microseconds; 0: what NVML keeps). A process with several samples counts with their mean;
    a GPU with no sample (NVML_ERROR_NOT_FOUND: nothing ran) is idle; one NVML cannot answer for is left
    out."""
    import pynvml

    out: dict[str, dict[int, int]] = {}
    for uuid in gpu_uuids:
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
        except pynvml.NVMLError_NotFound:
            out[uuid] = {}
            continue
        except pynvml.NVMLError as e:
            event(log, logging.DEBUG, "enforcement.utilization-unavailable", gpu=uuid, error=str(e))
            continue
        per_pid: dict[int, list[int]] = {}
        for sample in samples:
            per_pid.setdefault(int(sample.pid), []).append(int(sample.smUtil))
        out[uuid] = {pid: round(sum(v) / len(v)) for pid, v in per_pid.items()}
    return out


class EventSink(Protocol):
    def create_event(self, namespace: str, body: dict[str, Any]) -> None: ...



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
        killer: Callable[[int, Collection[str]], None] | None = None,
        utilization: Callable[[Iterable[str], int], dict[str, dict[int, int]]] | None = nvml_utilization,
        core_window: int = CORE_WINDOW,
        clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
    ):
        self.node = node
        self.events = events
        self.kill = kill
        self._processes = processes
        self._proc = Path(proc_root)
        self._allowance = allowance
        # (pid, pods it may be in): raises unless the pid's cgroup, read now, is one of them
        self._killer = killer or (lambda pid, pods: pidfd_kill(pid, pods, self._proc))
        self._utilization = utilization  # None: no compute check
        self._core_window = core_window
        self._clock_us = clock_us
        self._since_us = 0  # NVML utilization samples are asked for since the last pass
        self._core_history: dict[tuple[str, str], deque[CoreSample]] = {}
        self._core_shares: dict[tuple[str, str], tuple[int, str]] = {}  # what each history was judged against
        self._previous: set[tuple[str, ...]] = set()  # findings of the last pass
        self._reported: set[tuple[str, ...]] = set()
        self._unattributed: dict[str, int] = {}  # claim uid -> passes in a row its region was unattributed
        self.findings = Findings()
        # pod UID -> GPUs where, at the last pass, a process of that pod ran that no claim holds: the region
        # watcher refreshes those GPUs' claims' reservedFor (a pod that joined a shared claim after prepare)
        self.unknown_pods: dict[str, set[str]] = {}

    def check(self, claims: list[ClaimView], refs: Mapping[str, tuple[str, str]]) -> Findings:
        """One pass; `refs`: claim uid -> (namespace, name) of every prepared claim (for Events)."""
        gpus = sorted({g for c in claims for g in c.gpus if g})
        if not gpus:
            self.findings = Findings(kills=self.findings.kills)
            return self.findings
        utilization = None
        if self._utilization is not None:
            now = self._clock_us()
            utilization = self._utilization(gpus, self._since_us)
            self._since_us = now
        processes = self._processes(gpus)
        pod_of = pods_of_processes((p.pid for procs in processes.values() for p in procs), self._proc)
        claims = attribute(claims, processes, pod_of)
        by_pod: dict[str, list[ClaimView]] = {}
        for c in sorted(claims, key=lambda c: c.uid):
            for pod in c.pods:
                by_pod.setdefault(pod, []).append(c)

        def owner(pid: int) -> str | None:
            mine = by_pod.get(pod_of.get(pid) or "", [])
            return mine[0].uid if mine else None

        found = cross_check(claims, processes, owner, self._allowance, utilization, pod_of)
        self.unknown_pods = {}
        for u in found.unenforced:
            if u.pod_uid and u.pod_uid not in by_pod:
                self.unknown_pods.setdefault(u.pod_uid, set()).add(u.gpu_uuid)
        found.kills = self.findings.kills
        found.over_share = self._judge_cores(claims, found.core_samples)
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
            owner = next((c for c in claims if c.uid == u.claim_uid), None)
            # a process of no claim's pod (the host's, another workload's) is reported, never killed
            if self.kill and owner is not None and self._kill(u.pid, owner.pods, "unenforced", u.gpu_uuid):
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
                confirmed.kills += self._kill(pid, o.pods, "over-quota", o.gpu_uuid)
        # The compute check has its own window (over_share): what it finds is confirmed already.
        confirmed.core_samples = found.core_samples
        for s in found.over_share:
            key = ("over-share", s.claim_uid, s.gpu_uuid)
            seen.add(key)
            confirmed.over_share.append(s)
            if key not in self._reported:
                self._report_over_share(s, refs)
            for pid in s.pids if self.kill else ():
                confirmed.kills += self._kill(pid, s.pods, "over-share", s.gpu_uuid)
            if self.kill:
                self._core_history.pop((s.claim_uid, s.gpu_uuid), None)  # judge its survivors afresh
        self._unattributed = {uid: self._unattributed.get(uid, 0) + 1 for uid in found.unattributed}
        for uid, passes in sorted(self._unattributed.items()):
            if passes < UNATTRIBUTED_PASSES:
                continue
            key = ("unattributed", uid)
            seen.add(key)
            confirmed.unattributed.append(uid)
            if key not in self._reported:
                self._report_unattributed(uid, passes, refs)
        self._previous = seen
        # a finding that went away is reported again if it comes back
        self._reported = (
            {k for k in self._reported if k in seen}
            | {("unenforced", u.gpu_uuid, str(u.pid)) for u in confirmed.unenforced}
            | {("over-quota", o.claim_uid, o.gpu_uuid) for o in confirmed.over_quota}
            | {("over-share", s.claim_uid, s.gpu_uuid) for s in confirmed.over_share}
            | {("unattributed", uid) for uid in confirmed.unattributed}
        )
        self.findings = confirmed
        return confirmed

    def _judge_cores(
        self, claims: list[ClaimView], samples: Mapping[tuple[str, str], CoreSample]
    ) -> list[OverShare]:
        """Add this pass's samples to each (claim, GPU)'s history and judge it (over_share). A pass without a
        sample for a claim's GPU (NVML could not answer, the share changed to none) clears its history:
        the window counts passes in a row."""
        self._core_history = {k: h for k, h in self._core_history.items() if k in samples}
        self._core_shares = {k: v for k, v in self._core_shares.items() if k in samples}
        found = []
        for c in claims:
            for gpu, share in zip(c.gpus, c.core_shares, strict=False):
                sample = samples.get((c.uid, gpu))
                if sample is None:
                    continue
                key = (c.uid, gpu)
                if self._core_shares.get(key) != (share, c.core_policy):
                    # samples taken under another share or policy say nothing about this one
                    self._core_history.pop(key, None)
                    self._core_shares[key] = (share, c.core_policy)
                history = self._core_history.setdefault(key, deque(maxlen=self._core_window))
                history.append(sample)
                mean = over_share(history, share, c.core_policy, self._core_window)
                if mean is not None:
                    pods = tuple(sorted(c.pods))
                    found.append(OverShare(c.uid, gpu, mean, share, c.core_policy, sample.pids, pods))
        return found

    def _report_over_share(self, s: OverShare, refs: Mapping[str, tuple[str, str]]) -> None:
        event(
            log,
            logging.WARNING,
            "enforcement.over-share",
            uid=s.claim_uid,
            gpu=s.gpu_uuid,
            used_percent=s.used_percent,
            share_percent=s.share_percent,
            policy=s.policy,
            pids=list(s.pids),
        )
        why = (
            "the core policy is force"
            if s.policy == POLICY_FORCE
            else "other processes were busy on the GPU, so its core policy did not let it burst"
        )
        message = (
            f"NVML shows processes {list(s.pids)} using {s.used_percent}% of GPU {s.gpu_uuid}'s SMs over the "
            f"last {self._core_window} checks, over the claim's compute share of {s.share_percent}% ({why})"
            + ("; killed (--kill-unenforced)" if self.kill else "")
        )
        self._event(s.claim_uid, REASON_OVER_SHARE, message, refs)

    def _report_unattributed(self, uid: str, passes: int, refs: Mapping[str, tuple[str, str]]) -> None:
        event(log, logging.WARNING, "enforcement.unattributed", uid=uid, passes=passes)
        message = (
            f"the claim's region reports running processes, but for {passes} checks in a row NVML showed no "
            "process of the claim's pods on its GPUs: the region's process list is not trusted (a forged or "
            "stale region); the GPUs are checked from the node's own view"
        )
        self._event(uid, REASON_UNATTRIBUTED, message, refs)

    def _report_unenforced(self, u: Unenforced, refs: Mapping[str, tuple[str, str]]) -> None:
        event(
            log,
            logging.WARNING,
            "enforcement.unenforced-process",
            gpu=u.gpu_uuid,
            pid=u.pid,
            used_bytes=u.used_bytes,
            uid=u.claim_uid,
            pod=u.pod_uid,
        )
        message = (
            f"process {u.pid} of pod {u.pod_uid} uses GPU {u.gpu_uuid} ({u.used_bytes} bytes), a GPU none of "
            "the pod's carve claims holds: its memory and compute are not limited"
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

    def _kill(self, pid: int, pods: Collection[str], why: str, gpu: str) -> bool:
        try:
            self._killer(pid, pods)
        except ProcessLookupError:
            return False
        except OSError as e:
            event(log, logging.ERROR, "enforcement.kill-failed", pid=pid, why=why, gpu=gpu, error=e.strerror)
            return False
        event(log, logging.WARNING, "enforcement.killed", pid=pid, why=why, gpu=gpu)
        return True
