"""The GPU health monitor: a thread that reads NVML (driver/gpu/events.py) and keeps a HealthBook.

Each turn waits up to `interval_s` on the event set (XIDs arrive as they happen), then probes every GPU
for the level signals (lost, ECC pages pending), lets the book recover GPUs that stayed clean for the
recovery period, and hands every flip to `on_change` (the plugin: taints, Events, metrics, the kubelet's
health stream).

The book is kept in `<plugin-dir>/health.json` (versioned, atomic writes), so a restarted plugin does not
forget a fatal XID it saw a minute ago. Deleting that file is the admin's reset: every GPU the monitor
holds unhealthy is healthy again at the next turn (a signal still present marks it again at once).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from driver.fsutil import write_atomic
from driver.gpu import events
from driver.plugin.health.policy import (
    CAUSE_EVENT_ERROR,
    CAUSE_LOST,
    CAUSE_PAGES,
    Change,
    HealthBook,
    xid_cause,
)
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

STATE_VERSION = 1
STATE_FILE = "health.json"


class HealthMonitor:
    def __init__(
        self,
        gpus: Sequence[tuple[str, int]],  # (uuid, index) of every GPU of the node
        on_change: Callable[[list[Change]], None],
        state_path: Path,
        recovery_s: float = 300.0,
        ignored_xids: frozenset[int] = frozenset(),
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
    ):
        self.book = HealthBook(recovery_s=recovery_s)
        for uuid, index in gpus:
            self.book.track(uuid, index)
        self.on_change = on_change
        self.state_path = state_path
        self.ignored = ignored_xids
        self.interval_s = interval_s
        self.clock = clock
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._events: events.EventSet | None = None
        self._wait_error = ""

    # --- what the plugin reads ---------------------------------------------------------------------------

    def unhealthy(self) -> dict[int, str]:
        """GPU index -> cause, now."""
        with self.lock:
            return self.book.unhealthy()

    # --- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        restored = self._load()
        try:
            self._events = events.EventSet()
        except Exception as e:  # no event API (an old driver): the level probes still run
            event(log, logging.WARNING, "health.events-unavailable", error=f"{type(e).__name__}: {e}")
        if self._events is not None:
            for uuid in list(self.book.gpus):
                why = self._events.register(uuid)
                if why:
                    event(log, logging.WARNING, "health.register-failed", gpu=uuid, error=why)
                    if why == "lost":
                        restored += self._observe(uuid, CAUSE_LOST)
        event(
            log, logging.INFO, "health.started", gpus=len(self.book.gpus), unhealthy=self.unhealthy() or None
        )
        if restored:
            self._emit(restored)
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 + self.interval_s)
        if self._events is not None:
            self._events.close()

    # --- the loop ----------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.turn()
            except Exception as e:  # the monitor must outlive a surprise; the next turn tries again
                event(
                    log, logging.ERROR, "health.turn-failed", exc_info=True, error=f"{type(e).__name__}: {e}"
                )
                self._stop.wait(self.interval_s)

    def turn(self) -> list[Change]:
        """One wait on the event set, one probe of every GPU, recovery; returns (and emits) the flips."""
        changes: list[Change] = []
        if self._events is not None:
            try:
                xid = self._events.wait(int(self.interval_s * 1000))
                self._wait_error = ""
                if xid is not None:
                    changes += self._on_xid(xid)
            except events.WaitLost:
                self._stop.wait(self.interval_s)  # the probes below find which GPU; do not spin
            except events.WaitFailed as e:
                if str(e) != self._wait_error:
                    event(log, logging.ERROR, "health.wait-failed", error=str(e))
                self._wait_error = str(e)
                for uuid in list(self.book.gpus):  # as NVIDIA's driver does: every GPU is suspect
                    changes += self._observe(uuid, CAUSE_EVENT_ERROR)
                self._stop.wait(self.interval_s)
        else:
            self._stop.wait(self.interval_s)
        for uuid in list(self.book.gpus):
            signals = events.probe(uuid)
            if signals.lost:
                changes += self._observe(uuid, CAUSE_LOST)
            elif signals.pages_pending:
                changes += self._observe(uuid, CAUSE_PAGES)
        now = self.clock()
        with self.lock:
            if self.book.unhealthy() and not self.state_path.exists():
                reset = self.book.reset(list(self.book.gpus), now)
                if reset:
                    event(
                        log,
                        logging.WARNING,
                        "health.reset",
                        gpus=[c.uuid for c in reset],
                        by="state file removed",
                    )
                changes += reset
            changes += self.book.tick(now)
        if changes:
            self._emit(changes)
        return changes

    def _on_xid(self, xid: events.XidEvent) -> list[Change]:
        cause = xid_cause(xid.xid, self.ignored)
        event(
            log,
            logging.WARNING if cause else logging.INFO,
            "health.xid",
            gpu=xid.uuid,
            xid=xid.xid,
            action="mark unhealthy" if cause else "ignored (application error)",
        )
        return self._observe(xid.uuid, cause) if cause else []

    def _observe(self, uuid: str, cause: str) -> list[Change]:
        with self.lock:
            change = self.book.observe(uuid, cause, self.clock())
        return [change] if change else []

    def _emit(self, changes: list[Change]) -> None:
        self._save()
        for c in changes:
            event(
                log,
                logging.WARNING if not c.healthy else logging.INFO,
                "health.unhealthy" if not c.healthy else "health.recovered",
                gpu=c.uuid,
                index=c.index,
                cause=c.cause,
            )
        try:
            self.on_change(changes)
        except Exception as e:
            event(log, logging.ERROR, "health.notify-failed", exc_info=True, error=f"{type(e).__name__}: {e}")

    # --- the state file ----------------------------------------------------------------------------------

    def _save(self) -> None:
        with self.lock:
            gpus = {
                g.uuid: {"index": g.index, "cause": g.cause, "lastBad": g.last_bad}
                for g in self.book.gpus.values()
                if not g.healthy
            }
        body = json.dumps({"version": STATE_VERSION, "unhealthy": gpus}, indent=1, sort_keys=True)
        write_atomic(self.state_path, body.encode(), mode=0o600)

    def _load(self) -> list[Change]:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            self._save()  # the file's presence is what the admin removes to reset
            return []
        except (OSError, ValueError) as e:
            event(log, logging.WARNING, "health.state-unreadable", path=str(self.state_path), error=str(e))
            self._save()
            return []
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            event(
                log, logging.WARNING, "health.state-version", path=str(self.state_path), found=str(data)[:80]
            )
            self._save()
            return []
        out = []
        for uuid, rec in (data.get("unhealthy") or {}).items():
            if uuid in self.book.gpus and isinstance(rec, dict) and isinstance(rec.get("cause"), str):
                last_bad = rec.get("lastBad")
                when = float(last_bad) if isinstance(last_bad, int | float) else self.clock()
                change = self.book.observe(uuid, rec["cause"], when)
                if change:
                    out.append(change)
        return out
