"""List+watch of one collection into the extender's state (a reflector, as client-go's informers have).

`Reflector.run` lists the collection, hands the items to `replace`, then watches from the list's
resourceVersion and hands every event to `apply`, carrying the version forward, so the state follows the
API within one event's latency. A watch ends at its timeout and is resumed from the last version seen; a
410 Gone (the version was compacted away) lists again at once; any other failure is retried with a bounded
exponential backoff (`backoff_s` doubling to `max_backoff_s`), resuming the watch if a version is known
(after an error that is not the API's, e.g. an event the state cannot take, from a new list).
Every `relist_s` it lists again anyway: the safety net for an event that never arrived.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from driver.cluster.base import ClusterError
from driver.legacy.kubeapi import Source
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
GONE = 410


class WatchApi(Protocol):
    def list_versioned(self, source: Source) -> tuple[list[dict[str, Any]], str]: ...
    def watch(
        self, source: Source, resource_version: str, timeout_s: int
    ) -> Iterator[tuple[str, dict[str, Any]]]: ...


class Reflector:
    def __init__(
        self,
        api: WatchApi,
        source: Source,
        replace: Callable[[list[dict[str, Any]]], None],
        apply: Callable[[str, dict[str, Any]], None],
        relist_s: float,
        watch_timeout_s: float = 300.0,
        backoff_s: float = 0.2,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.api, self.source = api, source
        self.replace, self.apply = replace, apply
        self.relist_s, self.watch_timeout_s = relist_s, watch_timeout_s
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.synced = threading.Event()  # set after the first list was applied
        self.lists = 0  # how many times it listed (tests and logs)
        self.resource_version = ""

    def delay(self, failures: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** max(0, failures - 1))

    def run(self, stop: threading.Event) -> None:
        failures = 0
        relist_at = 0.0
        while not stop.is_set():
            try:
                if not self.resource_version or time.monotonic() >= relist_at:
                    items, self.resource_version = self.api.list_versioned(self.source)
                    self.replace(items)
                    self.lists += 1
                    self.synced.set()
                    relist_at = time.monotonic() + self.relist_s
                    failures = 0
                timeout = max(1, int(min(self.watch_timeout_s, relist_at - time.monotonic())))
                for kind, obj in self.api.watch(self.source, self.resource_version, timeout):
                    rv = ((obj or {}).get("metadata") or {}).get("resourceVersion", "")
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.apply(kind, obj)
                    if rv:  # BOOKMARK events carry only the version
                        self.resource_version = rv
                    failures = 0
                    if stop.is_set():
                        return
            except Exception as e:  # a bad event or a client bug must not end the informer
                if isinstance(e, ClusterError) and e.status == GONE:
                    event(log, logging.INFO, "watch.expired", resource=self.source.resource, action="relist")
                    self.resource_version = ""
                    continue
                if not isinstance(e, ClusterError):
                    self.resource_version = ""  # not an API failure: start again from a list
                failures += 1
                wait = self.delay(failures)
                event(
                    log,
                    logging.WARNING,
                    "watch.failed",
                    resource=self.source.resource,
                    error=str(e),
                    retry_in_s=round(wait, 2),
                )
                stop.wait(wait)

    def start(self, stop: threading.Event) -> threading.Thread:
        t = threading.Thread(target=self.run, args=(stop,), name=f"watch-{self.source.resource}", daemon=True)
        t.start()
        return t


__all__ = ["Reflector", "WatchApi"]
