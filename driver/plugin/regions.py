"""The region watcher: the plugin's side of the limiter's feedback loop, for the claims prepared on this node.

Every few seconds a background thread opens the region of each prepared soft-slice or slot claim and
 - fills in the host pids of the claim's processes (Region.resolve_host_pids): NVML reports host pids, a
   containerised process cannot see its own, and the limiter needs them to attribute SM utilization to its
   claim rather than to the whole GPU. Seeing them needs the host's pid namespace (hostPID: true);
 - marks high-priority neighbours: each device of a low-priority claim gets the number of OTHER
   high-priority claims with a device on the same GPU (by UUID), so the limiter knows whom to yield to.
`high_neighbour_marks` is the pure rule; `RegionWatcher` applies it to the files. A missing or corrupt
region is logged once and skipped; nothing the watcher meets stops it or the plugin.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from driver import names
from driver.limits import Region, RegionError, scan_host_pids
from driver.plugin.checkpoint import STATE_COMPLETED, ClaimRecord
from driver.plugin.edits import ClaimFiles
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 2.0
LIMITED_TYPES = (names.TYPE_VGPU, names.TYPE_SLOT)


@dataclass(frozen=True)
class ClaimRegion:
    """What the sharing rules need of one claim, from the plugin's own records (never the writable region)."""

    uid: str
    priority: str  # high | low
    gpus: tuple[str, ...]  # the GPU UUID of each device, "" when unknown
    cores: tuple[int, ...] = ()  # the cores percent each device reserved; 0 = best effort


MIN_BEST_EFFORT_SHARE = 1  # what a best-effort claim keeps when reservations take the whole GPU (0 = no limit)


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


def limited_claims(state: Mapping[str, ClaimRecord]) -> list[str]:
    """UIDs of the prepared claims that run under the limiter (they have a region file)."""
    return sorted(
        uid
        for uid, record in state.items()
        if record.state == STATE_COMPLETED and any(d.type in LIMITED_TYPES for d in record.devices)
    )


class RegionWatcher:
    """Applies host pids and neighbour marks to the regions of the prepared claims, every `interval_s`."""

    def __init__(
        self,
        state: Callable[[], Mapping[str, ClaimRecord]],
        claims_dir: Path,
        interval_s: float = DEFAULT_INTERVAL_S,
        proc_root: Path = Path("/proc"),
    ):
        self._state = state
        self._claims_dir = Path(claims_dir)
        self.interval_s = interval_s
        self._proc = Path(proc_root)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: dict[str, str] = {}  # uid (or "" for the watcher) -> problem logged last

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
        """One pass over the prepared claims' regions."""
        regions: dict[str, Region] = {}
        uids = limited_claims(dict(self._state()))
        try:
            for uid in uids:
                path = ClaimFiles(self._claims_dir / uid).region
                try:
                    regions[uid] = Region.open(path)
                except RegionError as e:
                    self._report_once(uid, "regions.skipped", str(e))
                    continue
                if self._reported.pop(uid, None) is not None:
                    event(log, logging.INFO, "regions.recovered", uid=uid, region=str(path))
            self._resolve_pids(regions)
            self._mark(regions)
        finally:
            for region in regions.values():
                region.close()
        for uid in set(self._reported) - set(uids) - {""}:
            del self._reported[uid]  # the claim is gone: report it afresh if it comes back broken

    def _resolve_pids(self, regions: dict[str, Region]) -> None:
        waiting = [r for r in regions.values() if r.needs_host_pids()]
        if not waiting:
            return
        known = scan_host_pids(self._proc)  # one walk of /proc for every claim
        for region in waiting:
            region.resolve_host_pids(self._proc, known)

    def _mark(self, regions: dict[str, Region]) -> None:
        claims = [
            ClaimRegion(uid, r.priority, tuple(r.uuid(i) for i in range(r.device_count)))
            for uid, r in regions.items()
        ]
        for (uid, device), count in high_neighbour_marks(claims).items():
            region = regions[uid]
            if region.high_neighbours(device) != count:  # a write bumps the generation: only on change
                region.set_high_neighbours(device, count)
                event(log, logging.INFO, "regions.marked", uid=uid, device=device, high_neighbours=count)

    def _report_once(self, key: str, name: str, problem: str, exc_info: bool = False) -> None:
        if self._reported.get(key) == problem:
            return
        self._reported[key] = problem
        level = logging.ERROR if exc_info else logging.WARNING
        event(log, level, name, exc_info=exc_info, uid=key or None, error=problem)
