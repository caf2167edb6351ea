"""The plugin applies its node's NodePartitioning: desired strategies in, MIG modes switched on idle GPUs
(driver/plugin/mig/modes.py, through the publisher's `select`), slices republished, status written back.

`NodePartitioningApplier` is wired into the Plugin (server.py):
- `start_strategies(flag)` at start, before anything is published: reads the change in progress
  (partitioning_state.py) and the NodePartitioning; resumes the recorded change while the object still asks
  for it, rolls back to the strategies before it when the object is gone; returns what to request.
  Without a NodePartitioning the GPUs keep what was last applied (a node that never had one: --strategy);
  GPUs a NodePartitioning does not name run --strategy.
- An informer on the node's own NodePartitioning (field selector metadata.name=<node>) calls `changed()`:
  new desired strategies or migLayouts are recorded (state `applying`) before the publisher is asked for
  them, and the publisher thread is woken.
- `select_layouts(prepared)` before each publish, under the plugin's node lock: each GPU's new layout is
  published once the GPU has no prepared claim (partitioning_state.layouts_now), recorded before it is.
  At start the layouts published are the record's, not the spec's.
- `published()` after every successful publish: the status (per GPU the published strategy, MIG mode,
  what a change waits for; Applied and Degraded) is written to the status subresource when it changed,
  and a change whose every GPU is applied is recorded `applied`.
Fault points (CARVE_FAULT, faults.py) sit after each durable step: the record, the publish, the status.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from api.v1alpha1.partitioning import NodePartitioning, PartitioningError, parse_node_partitioning
from driver.cluster.base import ClusterError, Conflict, NotFound
from driver.cluster.informer import Informer
from driver.gpu.model import Gpu
from driver.plugin import faults
from driver.plugin.logfmt import event
from driver.plugin.mig.partitioning_state import (
    APPLIED,
    APPLYING,
    ChangeRecord,
    Layouts,
    desired_strategies,
    layouts_now,
    read_record,
    status_of,
    write_record,
)

log = logging.getLogger(__name__)
PLURAL = "nodepartitionings"


def _comparable(status: dict[str, Any] | None) -> Any:
    """A status without its timestamps: written again only when this differs."""
    if not status:
        return None
    return {
        **status,
        "conditions": [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ],
    }


def _layouts_text(layouts: Layouts) -> str:
    """`0=3g.40gb@4+1g.10gb@*` for the log; empty: no GPU has a layout (every placement)."""
    return ",".join(
        f"{i}=" + "+".join(f"{p}@{'*' if n is None else n}" for p, n in slots)
        for i, slots in sorted(layouts.items())
    )


class NodePartitioningApplier:
    def __init__(
        self,
        api,
        node_name: str,
        plugin_dir: Path,
        gpus: Callable[[], list[Gpu]],
        request: Callable[[dict[int, str]], dict[int, str]],
        wake: Callable[[], None],
        modes: Callable[[], dict[int, Any]],
    ) -> None:
        """`request(strategies)` asks the publisher for them and returns what it asked for before;
        `wake()` makes the publisher thread publish now; `modes()` are modes.py's last decisions."""
        self.api = api
        self.node_name = node_name
        self.plugin_dir = Path(plugin_dir)
        self.gpus = gpus
        self.request = request
        self.wake = wake
        self.modes = modes
        self.default: dict[int, str] = {}
        self.pinned: frozenset[int] = frozenset()  # GPUs the node's strategy rules pin
        self.default_sources: dict[int, str] = {}  # who set each default (rules.SOURCES)
        self.sources: dict[int, str] = {}  # who set each GPU's desired strategy
        self.generation = 0
        self.problems: list[str] = []
        self.desired: dict[int, str] = {}
        self.layouts: Layouts = {}  # GPU index -> its desired migLayout: the MIG devices it should publish
        self.published_layouts: Layouts = {}  # the layouts in the slices (the record's publishedLayouts)
        self.layout_waits: dict[int, str] = {}  # GPU index -> why its new layout is not published yet
        self.exists = False
        self._written: dict[str, Any] | None = None
        self._lock = threading.RLock()
        self.informer: Informer | None = None

    # ---- start --------------------------------------------------------------------------------------

    def _get(self) -> NodePartitioning | None:
        try:
            obj = self.api.get_object(PLURAL, self.node_name)
        except NotFound:
            return None
        except ClusterError as e:  # no CRD, no API server: the --strategy flag holds until it answers
            event(log, logging.WARNING, "partitioning.unreadable", node=self.node_name, error=str(e))
            return None
        return self._parse(obj)

    def _parse(self, obj: dict[str, Any]) -> NodePartitioning | None:
        try:
            np = parse_node_partitioning(obj)
        except PartitioningError as e:  # admitted by a looser schema: report, keep what runs
            event(log, logging.ERROR, "partitioning.invalid", node=self.node_name, error=str(e))
            self.problems = [str(e)]
            return None
        self._written = obj.get("status") or self._written
        return np

    def start_strategies(
        self,
        flag: dict[int, str],
        pinned: frozenset[int] | set[int] = frozenset(),
        sources: dict[int, str] | None = None,
    ) -> dict[int, str]:
        """What the publisher requests first (see the module doc). `pinned`: GPUs the rules pin (only a
        pinned NodePartitioning entry changes them); `sources`: who set each of `flag`'s strategies."""
        with self._lock:
            self.default = dict(flag)
            self.pinned = frozenset(pinned)
            self.default_sources = dict(sources or {})
            self.sources = dict(self.default_sources)
            np = self._get()
            self.exists = np is not None
            record = read_record(self.plugin_dir)
            self.published_layouts = dict(record.published_layouts) if record else {}
            if record is not None and record.state == APPLYING and np is None:
                event(
                    log,
                    logging.WARNING,
                    "partitioning.rollback",
                    node=self.node_name,
                    generation=record.generation,
                    strategies=record.previous,
                    detail="a change was in progress and its NodePartitioning is gone",
                )
                write_record(
                    self.plugin_dir,
                    ChangeRecord(
                        record.generation,
                        record.previous,
                        record.previous,
                        APPLYING,
                        record.previous_layouts,
                        record.previous_layouts,
                        record.published_layouts,
                    ),
                )
                self.desired = dict(record.previous)
                self.layouts = dict(record.previous_layouts)
                return dict(self.desired)
            if record is not None and np is None:
                # No NodePartitioning (deleted, or the API unreadable): keep what was last applied, but
                # for the GPUs the rules pin (the admin's word beats what a controller once chose).
                self.desired = {**record.desired, **{i: flag[i] for i in self.pinned if i in flag}}
                self.layouts = {i: v for i, v in record.layouts.items() if i not in self.pinned}
                self.sources = {
                    i: self.default_sources.get(i, "default") if self.desired.get(i) == s else "controller"
                    for i, s in flag.items()
                }
                return dict(self.desired)
            if record is not None and record.state == APPLYING:
                event(
                    log,
                    logging.WARNING,
                    "partitioning.resume",
                    node=self.node_name,
                    generation=record.generation,
                    strategies=record.desired,
                )
            wanted = desired_strategies(np, self.gpus(), flag, self.pinned, self.default_sources)
            self.sources = wanted.sources
            self.problems = wanted.problems or self.problems
            self.layouts = wanted.layouts
            self.generation = np.generation if np else 0
            self.desired = wanted.strategies
            if record is None or record.desired != self.desired or record.layouts != self.layouts:
                before = record.desired if record else dict(flag)
                # Only a change the NodePartitioning asks for is resumed or rolled back; the flag is simply
                # what runs without one.
                state = APPLYING if np is not None else APPLIED
                write_record(
                    self.plugin_dir,
                    ChangeRecord(
                        self.generation,
                        self.desired,
                        before,
                        state,
                        self.layouts,
                        record.layouts if record else {},
                        self.published_layouts,
                    ),
                )
                if np is not None:
                    faults.reached("partitioning-after-record")
            return dict(self.desired)

    def watch(self, stop: threading.Event, resync_s: float = 600.0) -> None:
        self.informer = Informer(
            self.api,
            PLURAL,
            lambda _: self.changed(),
            resync_s,
            backoff_s=30.0,
            field_selector=f"metadata.name={self.node_name}",
        )
        self.informer.start(stop)

    # ---- changes ------------------------------------------------------------------------------------

    def changed(self) -> None:
        """The NodePartitioning was added, changed or deleted (informer thread)."""
        obj = self.informer.get(f"/{self.node_name}") if self.informer else None
        with self._lock:
            self.problems = []
            np = self._parse(obj) if obj is not None else None
            if obj is not None and np is None:
                self.wake()  # invalid: the status says so at the next publish
                return
            self.exists = np is not None
            if np is None:
                return  # deleted: the GPUs keep what they run (no status to write either)
            wanted = desired_strategies(np, self.gpus(), self.default, self.pinned, self.default_sources)
            self.problems = wanted.problems
            self.sources = wanted.sources
            generation = np.generation
            same = wanted.strategies == self.desired and wanted.layouts == self.layouts
            if same and generation == self.generation:
                return
            self.generation = generation
            if not same:
                # A new layout is a change like a new strategy: recorded, then applied once its GPU is idle.
                write_record(
                    self.plugin_dir,
                    ChangeRecord(
                        generation,
                        wanted.strategies,
                        self.desired,
                        APPLYING,
                        wanted.layouts,
                        self.layouts,
                        self.published_layouts,
                    ),
                )
                faults.reached("partitioning-after-record")
                event(
                    log,
                    logging.INFO,
                    "partitioning.change",
                    node=self.node_name,
                    generation=generation,
                    strategies=",".join(f"{i}={s}" for i, s in sorted(wanted.strategies.items())),
                    layouts=_layouts_text(wanted.layouts),
                )
                self.layouts = dict(wanted.layouts)
                if wanted.strategies != self.desired:
                    self.desired = dict(wanted.strategies)
                    self.request(self.desired)
            self.wake()

    def select_layouts(self, prepared: dict[int, int]) -> Layouts:
        """The layouts to publish now (`prepared`: prepared claims per GPU index; the caller holds the node
        lock, so none is prepared meanwhile). A layout that changes is recorded before it is published."""
        with self._lock:
            now, self.layout_waits = layouts_now(self.published_layouts, self.layouts, prepared)
            if now != self.published_layouts:
                record = read_record(self.plugin_dir)
                if record is not None:
                    record.published_layouts = now
                    write_record(self.plugin_dir, record)
                event(
                    log, logging.INFO, "partitioning.layouts", node=self.node_name, layouts=_layouts_text(now)
                )
                self.published_layouts = now
            return dict(now)

    def published(self) -> None:
        """After a publish: write the status if it changed; record the change done once all is applied."""
        with self._lock:
            record = read_record(self.plugin_dir)
            changing = record is not None and record.state == APPLYING
            if changing:
                faults.reached("partitioning-after-publish")
            modes = self.modes()
            status = status_of(
                modes,
                self.gpus(),
                self.generation,
                self.problems,
                self._written,
                self.layout_waits,
                self.sources,
            )
            differs = self.exists and _comparable(status) != _comparable(self._written)
            if differs and self._write_status(status) and changing:
                faults.reached("partitioning-after-status")
            done = all(m.applied == m.effective for m in modes.values()) and not self.layout_waits
            asked = record is not None and (record.desired, record.layouts) == (self.desired, self.layouts)
            if done and changing and asked and record.published_layouts == self.layouts:
                record.state = APPLIED
                write_record(self.plugin_dir, record)
                event(
                    log,
                    logging.INFO,
                    "partitioning.applied",
                    node=self.node_name,
                    generation=record.generation,
                )

    def _write_status(self, status: dict[str, Any]) -> bool:
        for _ in range(2):
            try:
                current = self.api.get_object(PLURAL, self.node_name)
                self.api.update_object(PLURAL, {**current, "status": status}, status=True)
                self._written = status
                return True
            except Conflict:
                continue  # the controller wrote the spec meanwhile: read again
            except NotFound:
                self.exists = False
                return False
            except ClusterError as e:
                event(
                    log,
                    logging.WARNING,
                    "partitioning.status-failed",
                    node=self.node_name,
                    error=str(e),
                    action="written again after the next publish",
                )
                return False
        return False
