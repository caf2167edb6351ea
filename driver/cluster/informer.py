"""Informer: a local copy of one kind of object, kept current by list + watch, with a periodic resync.

One thread per kind: list (replace the copy, note the list's resourceVersion), then watch from that
version; each event updates the copy and calls `on_change(plural)`. A watch the server ends is resumed
from the last version seen; an expired version (410) or any error leads to a fresh list (after a backoff
on errors); every `resync_s` the kind is listed again anyway, so a missed event cannot last. Nothing lists
in a loop: between resyncs the API server only sends what changed.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from driver.cluster.base import ClusterError, Expired, ObjectApi
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Informer:
    def __init__(
        self,
        api: ObjectApi,
        plural: str,
        on_change: Callable[[str], None],
        resync_s: float = 600.0,
        watch_timeout_s: int = 300,
        backoff_s: float = 1.0,
        field_selector: str = "",
    ) -> None:
        self.api = api
        self.plural = plural
        self.on_change = on_change
        self.resync_s = resync_s
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.field_selector = field_selector  # e.g. metadata.name=<node>: one object
        self.synced = threading.Event()
        self.lists = 0  # how many times the kind was listed (tests check there is no list loop)
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}
        self._rv = ""
        self._thread: threading.Thread | None = None

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for _, o in sorted(self._items.items())]

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._items.get(key)
            return copy.deepcopy(found) if found is not None else None

    def start(self, stop: threading.Event) -> Informer:
        self._thread = threading.Thread(
            target=self.run, args=(stop,), name=f"informer-{self.plural}", daemon=True
        )
        self._thread.start()
        return self

    def relist(self) -> None:
        items, rv = self.api.list_objects(self.plural, self.field_selector)
        with self._lock:
            self._items = {object_key(o): o for o in items}
            self._rv = rv
        self.lists += 1
        self.synced.set()
        self.on_change(self.plural)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.relist()
                deadline = time.monotonic() + self.resync_s
                while not stop.is_set() and time.monotonic() < deadline:
                    timeout = int(max(1, min(self.watch_timeout_s, deadline - time.monotonic())))
                    events = self.api.watch_objects(self.plural, self._rv, timeout, self.field_selector)
                    for kind, obj in events:
                        self._apply(kind, obj)
                        if stop.is_set():
                            break
            except Expired:
                continue  # list again at once
            except Exception as e:  # ClusterError, a broken stream, a bug: log, back off, list again
                level = (
                    logging.WARNING if isinstance(e, (ClusterError, OSError, ValueError)) else logging.ERROR
                )
                event(
                    log,
                    level,
                    "informer.error",
                    kind=self.plural,
                    error=f"{type(e).__name__}: {e}",
                    retry_s=self.backoff_s,
                    exc_info=level == logging.ERROR,
                )
                stop.wait(self.backoff_s)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._items.pop(key, None)
            else:
                self._items[key] = obj
            self._rv = str((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
        self.on_change(self.plural)
