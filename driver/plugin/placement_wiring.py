"""The plugin's side of `--placement binpack|spread` (placement.py holds the pure parts): what each prepared
claim holds, the re-publish trigger after a burst of prepares and unprepares, and the shareable devices'
order as last published.

Only the order of the published shareable devices changes with the load; a re-publish is asked (`wake`)
only when that order would differ from the one the API server holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from driver.plugin.claims.dirs import ClaimDirs
from driver.plugin.logfmt import event
from driver.plugin.placement import (
    PLACEMENT_INDEX,
    Coalescer,
    Load,
    MemoryBook,
    gpu_loads,
    order_devices,
    shareable_order,
)
from driver.plugin.state.checkpoint import ClaimRecord

log = logging.getLogger(__name__)

AfterPrepare = Callable[[object, ClaimRecord, object], None]


class PlacementWiring:
    """Load-ordered publishing for one plugin: `loads()` for the slice builder, `published()` after each
    publish, `after_prepare()` around the preparer's hook, `unprepared()` from the unprepare hook."""

    def __init__(
        self,
        placement: str,
        claims_dir: Path | ClaimDirs,
        state: Callable[[], Mapping[str, ClaimRecord]],
        wake: Callable[[], None],
        coalesce_s: float,
    ):
        self.placement = placement
        self._state = state
        self._wake = wake
        self._memory = MemoryBook(claims_dir)
        self._watch = Coalescer(self._changed, coalesce_s, name="placement").start()
        self._published_slices: list[dict] = []
        self._published_order: tuple[str, ...] = ()

    @classmethod
    def for_flag(
        cls,
        placement: str,
        claims_dir: Path | ClaimDirs,
        state: Callable[[], Mapping[str, ClaimRecord]],
        wake: Callable[[], None],
        coalesce_s: float,
    ) -> PlacementWiring | None:
        """None under `--placement index`: the published order never depends on the load."""
        if placement == PLACEMENT_INDEX:
            return None
        return cls(placement, claims_dir, state, wake, coalesce_s)

    def loads(self) -> dict[str, Load]:
        """GPU uuid -> Load of the claims prepared now. Reads the state without the node lock: a copy of
        the dict, taken atomically."""
        records = list(dict(self._state()).values())
        return gpu_loads(records, self._memory.memory(records))

    def published(self, stored: list[dict]) -> None:
        """What the API server holds now: the order a later burst is compared with."""
        self._published_slices = stored
        self._published_order = shareable_order(stored)

    def after_prepare(self, report: AfterPrepare) -> AfterPrepare:
        """The preparer's after_prepare hook with this claim's memory remembered and a re-check asked."""

        def hook(plan, record: ClaimRecord, limits) -> None:
            # Outside the node lock, after the checkpoint was written: two dict writes and an event.
            self._memory.remember(record.uid, limits)
            self._watch.notify()
            report(plan, record, limits)

        return hook

    def unprepared(self) -> None:
        self._watch.notify()

    def stop(self) -> None:
        self._watch.stop()

    def _changed(self) -> None:
        """After a burst of prepares/unprepares: re-publish when the load order of the published
        shareable devices changed (only their order differs; the publisher writes nothing otherwise)."""
        wanted = shareable_order(order_devices(self._published_slices, self.loads(), self.placement))
        if wanted != self._published_order:
            event(log, logging.INFO, "placement.reorder", placement=self.placement, order=list(wanted))
            self._wake()
