"""GPU-level placement of soft slices on the DRA path: the order in which the plugin publishes a node's
shareable devices.

The kube-scheduler has no scoring among the devices of a node: it takes the first device that fits, in the
order the pool's slices list them (docs/allocate.md, "Placement"). So the one lever a driver has is that
order. `--placement` sets it for the whole node (one published order serves every DeviceClass):

- `index` (the default, carve's order before this flag): GPU index order, whatever the load; first fit
  then fills GPU 0 before GPU 1, and an emptied low-index GPU is taken before a busier one.
- `binpack`: the most loaded GPU first (the scheduler skips it when the slice does not fit), so slices pile
  up on few GPUs and the rest stay free for big requests.
- `spread`: the least loaded GPU first, so slices go to idle GPUs before they share one.

Load is what prepared claims hold on a GPU: the memory of their limits (the quota the limiter enforces),
then their number of shares. Only shareable devices (allowMultipleAllocations with a `memory` capacity:
soft, mps) move, and only among their own positions within their slice: names, capacity, attributes and
which slice holds a device never change, so the pool's shape and the API limits checked at build stay as
they were. Ties go by GPU index.

The plugin learns of load changes from a cheap notification after prepare and unprepare (outside the node
lock) and re-publishes once per burst (`Coalescer`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driver.plugin.claims.dirs import ClaimDirs, as_dirs
from driver.plugin.logfmt import event
from driver.plugin.state.checkpoint import ClaimRecord

log = logging.getLogger(__name__)

PLACEMENT_INDEX = "index"
PLACEMENT_BINPACK = "binpack"
PLACEMENT_SPREAD = "spread"
PLACEMENTS = (PLACEMENT_INDEX, PLACEMENT_BINPACK, PLACEMENT_SPREAD)
DEFAULT_PLACEMENT = PLACEMENT_INDEX
# How long the plugin waits after a prepare/unprepare for more of them before it re-publishes the order.
DEFAULT_COALESCE_S = 0.5


@dataclass(frozen=True)
class Load:
    """What prepared claims hold on one GPU (order_devices ranks by memory first, then by shares)."""

    memory: int = 0
    shares: int = 0


def shareable_uuid(device: Mapping[str, Any]) -> str | None:
    """The GPU UUID of a device placement may move (shareable, sized by memory), else None."""
    if not device.get("allowMultipleAllocations") or "memory" not in (device.get("capacity") or {}):
        return None
    uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
    return uuid if isinstance(uuid, str) else None


def _gpu_index(device: Mapping[str, Any]) -> int:
    """The device's GPU index: ties go back to index order even when `slices` were reordered before."""
    index = ((device.get("attributes") or {}).get("index") or {}).get("int")
    return index if isinstance(index, int) else -1


def order_devices(slices: list[dict], loads: Mapping[str, Load], placement: str) -> list[dict]:
    """`slices` with each slice's shareable devices reordered among their own positions: binpack most
    loaded first, spread least loaded first, ties by GPU index (`index`: as built). Pure: the input is not
    changed; a slice without shareable devices is returned as it was."""
    if placement not in (PLACEMENT_BINPACK, PLACEMENT_SPREAD):
        return list(slices)
    sign = -1 if placement == PLACEMENT_BINPACK else 1
    out = []
    for s in slices:
        devices = (s.get("spec") or {}).get("devices") or []
        positions = [i for i, d in enumerate(devices) if shareable_uuid(d) is not None]
        if len(positions) < 2:
            out.append(s)
            continue

        def key(i: int, devices=devices) -> tuple[int, int, int, int]:
            load = loads.get(shareable_uuid(devices[i]) or "", Load())
            return (sign * load.memory, sign * load.shares, _gpu_index(devices[i]), i)

        ranked = sorted(positions, key=key)
        if ranked == positions:
            out.append(s)
            continue
        reordered = list(devices)
        for slot, i in zip(positions, ranked, strict=True):
            reordered[slot] = devices[i]
        out.append({**s, "spec": {**s["spec"], "devices": reordered}})
    return out


def shareable_order(slices: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The names of the shareable devices in published order (slices by name, devices as listed)."""
    ordered = sorted(slices, key=lambda s: s["metadata"]["name"])
    return tuple(
        d["name"]
        for s in ordered
        for d in (s.get("spec") or {}).get("devices") or []
        if shareable_uuid(d) is not None
    )


def gpu_loads(records: Iterable[ClaimRecord], memory: Mapping[str, Mapping[str, int]]) -> dict[str, Load]:
    """GPU UUID -> Load of the prepared (or being prepared) claims: one share per device record with a GPU
    (admin access excluded: it holds no quota), plus the memory `memory[claim uid][gpu uuid]` says."""
    totals: dict[str, list[int]] = {}
    for record in records:
        held = memory.get(record.uid) or {}
        for d in record.devices:
            if not d.gpu_uuid or d.admin:
                continue
            t = totals.setdefault(d.gpu_uuid, [0, 0])
            t[1] += 1
        for uuid, size in held.items():
            totals.setdefault(uuid, [0, 0])[0] += size
    return {uuid: Load(memory=m, shares=n) for uuid, (m, n) in totals.items()}


class MemoryBook:
    """Claim uid -> {GPU uuid: memory bytes} of its limits: told at prepare, read back from the claim's
    limits file for claims prepared before this process started, forgotten with the claim."""

    def __init__(self, claims_dir: Path | ClaimDirs):
        self.claims_dir = as_dirs(claims_dir)
        self._known: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def remember(self, uid: str, limits: Any) -> None:
        devices = getattr(limits, "devices", None) or ()
        held: dict[str, int] = {}
        for d in devices:
            if getattr(d, "uuid", ""):
                held[d.uuid] = held.get(d.uuid, 0) + int(getattr(d, "memory_bytes", 0) or 0)
        with self._lock:
            self._known[uid] = held

    def memory(self, records: Iterable[ClaimRecord]) -> dict[str, dict[str, int]]:
        """The memory of each of `records`; entries of claims no longer there are dropped."""
        from driver.limits.region import RegionError
        from driver.plugin.container.edits import ClaimFiles

        records = list(records)
        with self._lock:
            known = dict(self._known)
        out: dict[str, dict[str, int]] = {}
        for r in records:
            if r.uid in known:
                out[r.uid] = known[r.uid]
                continue
            if not any(d.gpu_uuid and not d.admin for d in r.devices):
                out[r.uid] = {}
                continue
            from driver.limits.limitsfile import read_limits

            try:
                view = read_limits(ClaimFiles(self.claims_dir / r.uid).limits)
            except (RegionError, OSError):
                out[r.uid] = {}  # no limits file (whole GPU, MIG, not limited): counted by shares only
                continue
            held: dict[str, int] = {}
            for uuid, size in zip(view.uuids, view.memory_limits, strict=False):
                if uuid:
                    held[uuid] = held.get(uuid, 0) + size
            out[r.uid] = held
        with self._lock:
            for uid in [u for u in self._known if u in known and u not in out]:
                del self._known[uid]  # unprepared (one remembered meanwhile is kept)
            for uid, held in out.items():
                self._known.setdefault(uid, held)
        return out


class Coalescer:
    """Runs `action` once after a burst of `notify()` calls: the first call of a burst starts a window of
    `window_s`; calls inside it are folded in; a call after the action started gives one more run.
    `notify` only sets an event: cheap enough for the prepare path."""

    def __init__(
        self, action: Callable[[], None], window_s: float = DEFAULT_COALESCE_S, name: str = "coalescer"
    ):
        self.action = action
        self.window_s = window_s
        self.runs = 0
        self._pending = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Coalescer:
        self._thread.start()
        return self

    def notify(self) -> None:
        self._pending.set()

    def stop(self) -> None:
        self._stop.set()
        self._pending.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._pending.wait()
            if self._stop.wait(self.window_s):
                return
            self._pending.clear()
            self.runs += 1
            try:
                self.action()
            except Exception as e:  # a missed reorder waits for the next notification or periodic publish
                event(log, logging.WARNING, "placement.failed", error=f"{type(e).__name__}: {e}")
