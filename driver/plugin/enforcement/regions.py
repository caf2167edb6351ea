"""The region watcher: the plugin's side of the limiter's feedback loop, for the claims prepared on this node.

Every few seconds a background thread, for each prepared soft-slice or slot claim:
 - keeps its plugin-owned limits file current (driver/limits/limitsfile.py): the effective compute share of
   each device (`effective_shares`: reserved cores are guaranteed, best-effort claims share what is left)
   and the number of high-priority neighbours on its GPU (`high_neighbour_marks`, a low-priority claim
   yields to them). Priority and GPU UUIDs come from the plugin's records (the checkpoint's GPU of each
   device, the limits file the plugin wrote), never from the region a container can write;
 - opens its region as untrusted (O_NOFOLLOW|O_NONBLOCK, regular file, relative to the claim directory;
   a region a container grew is cut back to its fixed size) and fills in the host pids of the claim's
   processes (Region.resolve_host_pids) for the limiter's own use. Seeing them needs the host's pid
   namespace (hostPID: true). The region's process list is a usage report: it decides nothing below;
 - cross-checks with NVML (enforcement/crosscheck.py, enforcer.py), each GPU process given to a claim by its
   cgroup's pod (attribution.py) and the pods the claim is reserved for (the checkpoint's record from
   prepare; refreshed from the API server, at most every REFRESH_PASSES passes per claim, when a process
   of a pod no claim knows runs on the claim's GPU: a pod that joined a shared claim after it was prepared):
   processes of no claim of their GPU, claims over their memory quota, claims over their effective compute
   share where their core policy does not permit it, claims whose region reports processes the node
   cannot find.
A missing or corrupt file is logged once and skipped; nothing the watcher meets stops it or the plugin.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from driver import names
from driver.limits import (
    ClaimLimits,
    ClaimRuntime,
    DeviceLimit,
    LimitsView,
    Region,
    RegionError,
    read_limits,
    scan_host_pids,
    write_limits,
)
from driver.plugin.claims.dirs import ClaimDirs, as_dirs
from driver.plugin.container.edits import ClaimFiles, region_container_path
from driver.plugin.enforcement.attribution import reserved_pods
from driver.plugin.enforcement.crosscheck import ClaimView
from driver.plugin.enforcement.enforcer import Enforcer
from driver.plugin.logfmt import event
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 2.0
LIMITED_TYPES = (names.TYPE_VGPU, names.TYPE_SLOT, names.TYPE_MPS)
REFRESH_PASSES = 5  # at most one read of a claim's reservedFor per this many passes


class ClaimReader(Protocol):
    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ClaimRegion:
    """What the sharing rules need of one claim, from the plugin's own records (never the writable region)."""

    uid: str
    priority: str  # high | low
    gpus: tuple[str, ...]  # the GPU UUID of each device, "" when unknown
    cores: tuple[int, ...] = ()  # the cores percent each device reserved; 0 = best effort


MIN_BEST_EFFORT_SHARE = (
    1  # what a best-effort claim keeps when reservations take the whole GPU (0 = no limit)
)


Marks = dict[tuple[str, int], int]  # (claim uid, region device index) -> high-priority neighbours


def high_neighbour_marks(claims: Iterable[ClaimRegion]) -> Marks:
    """For every device of every low-priority claim: how many other high-priority claims share its GPU.

    A device whose GPU is unknown ("") has no known neighbours (0). High-priority claims get no mark: only a
    low-priority limiter reads it.
    """
    claims = list(claims)
    high_on: dict[str, set[str]] = {}
    for c in claims:
        if c.priority == "high":
            for gpu in c.gpus:
                if gpu:
                    high_on.setdefault(gpu, set()).add(c.uid)
    return {
        (c.uid, i): len(high_on.get(gpu, set()) - {c.uid}) if gpu else 0
        for c in claims
        if c.priority == "low"
        for i, gpu in enumerate(c.gpus)
    }


def effective_shares(claims: Iterable[ClaimRegion]) -> dict[tuple[str, int], int]:
    """The compute share each device's limiter enforces (0 = no compute limit).

    Reserved cores are guaranteed: a device that reserved cores keeps exactly its reservation. A device that
    reserved none (best effort) shares only what the reservations on its GPU leave, so while reserved claims
    are busy it is held to 100 - reserved (at least MIN_BEST_EFFORT_SHARE); with no reservation on its GPU
    it is not limited. (Its limiter throttles only while a neighbour is busy, so an idle GPU is still used.)
    """
    claims = list(claims)
    reserved: dict[str, int] = {}
    for c in claims:
        for gpu, cores in zip(c.gpus, c.cores, strict=False):
            if gpu and cores:
                reserved[gpu] = reserved.get(gpu, 0) + cores
    shares = {}
    for c in claims:
        for i, gpu in enumerate(c.gpus):
            cores = c.cores[i] if i < len(c.cores) else 0
            if cores or not gpu or not reserved.get(gpu):
                shares[(c.uid, i)] = cores
            else:
                shares[(c.uid, i)] = max(MIN_BEST_EFFORT_SHARE, 100 - min(100, reserved[gpu]))
    return shares


def runtime_of(uid: str, device_count: int, claims: Iterable[ClaimRegion]) -> ClaimRuntime:
    """The effective shares and neighbour marks of one claim among all the claims of the node."""
    claims = list(claims)
    shares, marks = effective_shares(claims), high_neighbour_marks(claims)
    return ClaimRuntime(
        shares=tuple(shares.get((uid, i), 0) for i in range(device_count)),
        high_neighbours=tuple(marks.get((uid, i), 0) for i in range(device_count)),
    )


def limits_of(uid: str, view: LimitsView) -> ClaimLimits:
    """The claim's own limits, as its limits file records them (to rewrite the file with a new runtime)."""
    devices = tuple(
        DeviceLimit(memory, cores, uuid)
        for memory, cores, uuid in zip(view.memory_limits, view.cores_reserved, view.uuids, strict=True)
    )
    return ClaimLimits(devices, region_container_path(uid), view.core_policy, view.priority, view.oom_policy)


def claim_region(uid: str, view: LimitsView) -> ClaimRegion:
    return ClaimRegion(uid, view.priority, view.uuids, view.cores_reserved)


def claim_runtime(
    uid: str,
    limits: ClaimLimits,
    state: Mapping[str, ClaimRecord],
    claims_dir: Path | ClaimDirs,
    known: dict[str, ClaimRegion] | None = None,
) -> ClaimRuntime:
    """At prepare: the runtime of a new claim next to the claims already prepared on the node.

    `known` caches each claim's ClaimRegion (its priority, GPUs and reserved cores never change after its
    prepare): without it every prepare read every other claim's limits file, a cost that grew with the
    node (docs/reliability.md, the 1,000-claim node). Misses, after a restart, are read once and kept.
    """
    known = {} if known is None else known
    mine_gpus = {d.uuid for d in limits.devices if d.uuid}
    others = []
    for other, record in state.items():
        # A claim's shares and neighbour marks depend only on the claims of its own GPUs: skip the rest
        # before anything else (a 1,000-claim node, docs/reliability.md). checkpoint_gpus is empty for a
        # claim without limited devices, so this is limited_claims() restricted to our GPUs.
        if other == uid or not checkpoint_gpus(record) & mine_gpus:
            continue
        region = known.get(other)
        # A claim still between its checkpoint records counts once its own prepare computed its region (it
        # is in `known`): another process's prepare, or one past its bounded wait for its turn, writes its
        # files beside ours (docs/performance.md).
        if record.state != STATE_COMPLETED and region is None:
            continue
        if region is None:
            try:
                region = claim_region(other, read_limits(ClaimFiles(as_dirs(claims_dir) / other).limits))
            except RegionError:
                continue  # the watcher reports it; this claim's share is corrected at its next pass
            known[other] = region
        others.append(region)
    mine = ClaimRegion(
        uid,
        limits.priority,
        tuple(d.uuid for d in limits.devices),
        tuple(d.cores_percent for d in limits.devices),
    )
    known[uid] = mine
    return runtime_of(uid, len(limits.devices), [*others, mine])


def checkpoint_gpus(record: ClaimRecord) -> set[str]:
    """The GPUs of a claim's limited devices, as the plugin recorded them at prepare."""
    return {d.gpu_uuid for d in record.devices if d.type in LIMITED_TYPES and not d.admin and d.gpu_uuid}


def limited_claims(state: Mapping[str, ClaimRecord]) -> list[str]:
    """UIDs of the prepared claims that run under the limiter (they have a region file)."""
    return sorted(
        uid
        for uid, record in state.items()
        # An admin-access device (claims/admin.py) has no region: it is not limited.
        if record.state == STATE_COMPLETED
        and any(d.type in LIMITED_TYPES and not d.admin for d in record.devices)
    )


class RegionWatcher:
    """Keeps limits files current, fills host pids, and cross-checks with NVML, every `interval_s`."""

    def __init__(
        self,
        state: Callable[[], Mapping[str, ClaimRecord]],
        claims_dir: Path | ClaimDirs,
        interval_s: float = DEFAULT_INTERVAL_S,
        proc_root: Path = Path("/proc"),
        enforcer: Enforcer | None = None,
        claims: ClaimReader | None = None,
    ):
        self._state = state
        self._claims = claims  # None: the pods recorded at prepare are all the watcher knows
        self._claims_dir = as_dirs(claims_dir)
        self.interval_s = interval_s
        self._proc = Path(proc_root)
        self.enforcer = enforcer  # None: no NVML cross-check (no GPU access, or tests of the rest)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: dict[str, str] = {}  # uid (or "" for the watcher) -> problem logged last
        self._pods: dict[str, frozenset[str]] = {}  # claim uid -> pods read from its reservedFor since
        self._refreshed: dict[str, int] = {}  # claim uid -> pass of its last reservedFor read
        self._pass = 0

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="region-watcher", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick_safely()

    def tick_safely(self) -> None:
        try:
            self.tick()
        except Exception as e:  # the watcher serves the limiter; it must never take the plugin down
            self._report_once("", "regions.tick-failed", f"{type(e).__name__}: {e}", exc_info=True)
        else:
            self._reported.pop("", None)

    def tick(self) -> None:
        """One pass over the prepared claims."""
        state = dict(self._state())
        self._pass += 1
        uids = limited_claims(state)
        views = self._read_limits(uids, state)
        views = self._update_limits(views)
        regions: dict[str, Region] = {}
        try:
            for uid in views:
                path = ClaimFiles(self._claims_dir / uid).region
                try:
                    regions[uid] = self._open_region(uid, path)
                except RegionError as e:
                    self._report_once(uid, "regions.skipped", str(e))
                    continue
                if self._reported.pop(uid, None) is not None:
                    event(log, logging.INFO, "regions.recovered", uid=uid, region=str(path))
            self._resolve_pids(regions)
            if self.enforcer is not None:
                self._cross_check(state, views, regions)
        finally:
            for region in regions.values():
                region.close()
        for uid in set(self._reported) - set(uids) - {""}:
            del self._reported[uid]  # the claim is gone: report it afresh if it comes back broken
        for uid in set(self._pods) - set(uids):
            self._pods.pop(uid, None)
            self._refreshed.pop(uid, None)

    def _read_limits(self, uids: list[str], state: Mapping[str, ClaimRecord]) -> dict[str, LimitsView]:
        """Each claim's limits file, checked against the checkpoint: the GPUs it names are the claim's."""
        views = {}
        for uid in uids:
            path = ClaimFiles(self._claims_dir / uid).limits
            try:
                view = read_limits(path)
            except RegionError as e:
                self._report_once(uid, "regions.limits-unreadable", str(e))
                continue
            strange = set(filter(None, view.uuids)) - checkpoint_gpus(state[uid])
            if strange:
                self._report_once(
                    uid,
                    "regions.limits-mismatch",
                    f"limits {path}: GPUs {sorted(strange)} are not the claim's in the checkpoint",
                )
                continue
            views[uid] = view
        return views

    def _update_limits(self, views: dict[str, LimitsView]) -> dict[str, LimitsView]:
        """Rewrite the limits files whose runtime changed; the views as the files now are."""
        claims = [claim_region(uid, v) for uid, v in views.items()]
        current = dict(views)
        for uid, view in views.items():
            runtime = runtime_of(uid, len(view.uuids), claims)
            if (runtime.shares, runtime.high_neighbours) == (view.cores_limits, view.high_neighbours):
                continue  # a rewrite bumps the generation: only on change
            write_limits(ClaimFiles(self._claims_dir / uid).limits, limits_of(uid, view), runtime)
            current[uid] = dataclasses.replace(
                view, cores_limits=runtime.shares, high_neighbours=runtime.high_neighbours
            )
            event(
                log,
                logging.INFO,
                "regions.limits-updated",
                uid=uid,
                shares=list(runtime.shares),
                high_neighbours=list(runtime.high_neighbours),
            )
        return current

    def _open_region(self, uid: str, path: Path) -> Region:
        size = path.lstat().st_size if path.is_file() and not path.is_symlink() else None
        region = Region.open(path, cut_oversized=True)
        if size is not None and size > path.lstat().st_size:
            self._report_once(
                uid, "regions.oversized", f"region {path}: {size} bytes, cut back to its layout"
            )
        return region

    def _resolve_pids(self, regions: dict[str, Region]) -> None:
        waiting = [r for r in regions.values() if r.needs_host_pids()]
        if not waiting:
            return
        known = scan_host_pids(self._proc)  # one walk of /proc for every claim
        for region in waiting:
            region.resolve_host_pids(self._proc, known)

    def _cross_check(
        self, state: Mapping[str, ClaimRecord], views: dict[str, LimitsView], regions: dict[str, Region]
    ) -> None:
        claims = []
        for uid, view in views.items():
            region = regions.get(uid)
            record = state[uid]
            claims.append(
                ClaimView(
                    uid,
                    record.namespace,
                    record.name,
                    view.uuids,
                    view.memory_limits,
                    core_shares=view.cores_limits,  # the effective shares this pass's _update_limits wrote
                    core_policy=view.core_policy,
                    pods=frozenset(record.pods) | self._pods.get(uid, frozenset()),
                    reported_processes=self._live_slots(region) if region else 0,
                )
            )
        refs = {uid: (r.namespace, r.name) for uid, r in state.items()}
        assert self.enforcer is not None
        self.enforcer.check(claims, refs)
        unknown_on = {gpu for gpus in self.enforcer.unknown_pods.values() for gpu in gpus}
        for c in claims:
            if unknown_on & set(c.gpus):
                self._refresh_pods(c.uid, state[c.uid])

    def _live_slots(self, region: Region) -> int:
        """Slots the region reports as running: a slot whose host pid the node resolved and which has
        exited since (its limiter died before freeing it) does not count. A report only: nothing decides
        on it."""
        return sum(1 for p in region.processes() if not p.host_pid or (self._proc / str(p.host_pid)).exists())

    def _refresh_pods(self, uid: str, record: ClaimRecord) -> None:
        """Read the claim's reservedFor again (a pod may have joined a shared claim after prepare)."""
        if self._claims is None or self._pass - self._refreshed.get(uid, -REFRESH_PASSES) < REFRESH_PASSES:
            return
        self._refreshed[uid] = self._pass
        try:
            claim = self._claims.get_resource_claim(record.namespace, record.name)
        except Exception as e:  # the API server being away must not stop the watcher
            self._report_once(uid, "regions.reservations-unreadable", f"{type(e).__name__}: {e}")
            return
        if ((claim.get("metadata") if isinstance(claim, dict) else None) or {}).get("uid") != uid:
            return  # deleted and recreated under the same name: not this claim's pods
        self._pods[uid] = frozenset(reserved_pods(claim))

    def _report_once(self, key: str, name: str, problem: str, exc_info: bool = False) -> None:
        if self._reported.get(key) == problem:
            return
        self._reported[key] = problem
        level = logging.ERROR if exc_info else logging.WARNING
        event(log, level, name, exc_info=exc_info, uid=key or None, error=problem)
