"""List+watch of one collection: the `Reflector` loop, and the `Informer` that keeps a local copy with it.

`Reflector.run` lists the collection, hands the items to `replace`, then watches from the list's
resourceVersion and hands every ADDED/MODIFIED/DELETED event to `apply`, carrying the version forward
(BOOKMARK events only move the version). A watch the server ends is resumed from the last version seen;
an expired version (410) lists again at once; any other failure is retried after a backoff doubling from
`backoff_s` to `max_backoff_s`: an API error resumes the watch from the known version (the server sends
everything after it, or 410), anything else (a broken stream, an event the consumer cannot take) lists
again. Every `relist_s` the collection is listed again anyway, so a missed event cannot last; between
those lists the API server only sends what changed.

Where the strategy controller's informer and the scheduler extender's reflector used to differ, the
shared loop keeps the gentler or safer choice: the backoff grows (an API server in trouble is not hammered
at a fixed rate), BOOKMARK events never enter the copy, and an error that is not the API's lists again.

The loop reads through any `ListWatchApi` (`list_versioned(source)`, `watch(source, version, timeout)`):
the legacy `LegacyApi` is one with its `Source`; `ObjectListWatch` makes one of an `ObjectApi` for a
`Kind` (plural and optional field selector). `Informer` is the controller's and the plugin's form: it keeps
the objects by namespace/name and calls `on_change(plural)` after every list and event.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from driver.cluster.base import ClusterError, Expired, ObjectApi
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
GONE = 410


class Collection(Protocol):
    @property
    def resource(self) -> str: ...


S = TypeVar("S", bound=Collection)
S_contra = TypeVar("S_contra", bound=Collection, contravariant=True)


class ListWatchApi(Protocol[S_contra]):
    def list_versioned(self, source: S_contra) -> tuple[list[dict[str, Any]], str]: ...
    def watch(
        self, source: S_contra, resource_version: str, timeout_s: int
    ) -> Iterable[tuple[str, dict[str, Any]]]: ...


@dataclass(frozen=True)
class Kind:
    """One kind of object, all namespaces; `field_selector` (e.g. metadata.name=<node>) narrows it."""

    resource: str
    field_selector: str = ""


@dataclass(frozen=True)
class ObjectListWatch:
    """An `ObjectApi` seen as a `ListWatchApi` over `Kind`s."""

    api: ObjectApi

    def list_versioned(self, source: Kind) -> tuple[list[dict[str, Any]], str]:
        return self.api.list_objects(source.resource, source.field_selector)

    def watch(
        self, source: Kind, resource_version: str, timeout_s: int
    ) -> Iterable[tuple[str, dict[str, Any]]]:
        return self.api.watch_objects(source.resource, resource_version, timeout_s, source.field_selector)


def _expired(e: Exception) -> bool:
    return isinstance(e, Expired) or (isinstance(e, ClusterError) and e.status == GONE)


class Reflector(Generic[S]):
    def __init__(
        self,
        api: ListWatchApi[S],
        source: S,
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
        self.backoff_s, self.max_backoff_s = backoff_s, max(backoff_s, max_backoff_s)
        self.synced = threading.Event()  # set after the first list was applied
        self.lists = 0  # how many times it listed (tests check there is no list loop)
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
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.apply(kind, obj)
                    rv = ((obj or {}).get("metadata") or {}).get("resourceVersion", "")
                    if rv:  # BOOKMARK events carry only the version
                        self.resource_version = str(rv)
                    failures = 0
                    if stop.is_set():
                        return
            except Exception as e:  # a bad event or a client bug must not end the informer
                if _expired(e):
                    event(log, logging.INFO, "informer.expired", kind=self.source.resource, action="relist")
                    self.resource_version = ""
                    continue
                if not isinstance(e, ClusterError):
                    self.resource_version = ""  # not an API failure: start again from a list
                failures += 1
                wait = self.delay(failures)
                level = (
                    logging.WARNING if isinstance(e, (ClusterError, OSError, ValueError)) else logging.ERROR
                )
                event(
                    log,
                    level,
                    "informer.error",
                    kind=self.source.resource,
                    error=f"{type(e).__name__}: {e}",
                    retry_s=round(wait, 2),
                    exc_info=level == logging.ERROR,
                )
                stop.wait(wait)

    def start(self, stop: threading.Event) -> threading.Thread:
        t = threading.Thread(
            target=self.run, args=(stop,), name=f"informer-{self.source.resource}", daemon=True
        )
        t.start()
        return t


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Informer:
    """A local copy of one kind, by namespace/name, kept by a `Reflector` over an `ObjectApi`."""

    def __init__(
        self,
        api: ObjectApi,
        plural: str,
        on_change: Callable[[str], None],
        resync_s: float = 600.0,
        watch_timeout_s: int = 300,
        backoff_s: float = 1.0,
        field_selector: str = "",
        max_backoff_s: float = 30.0,
    ) -> None:
        self.plural = plural
        self.on_change = on_change
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}
        self.reflector = Reflector(
            ObjectListWatch(api),
            Kind(plural, field_selector),
            self._replace,
            self._apply,
            resync_s,
            watch_timeout_s,
            backoff_s,
            max_backoff_s,
        )
        self.synced = self.reflector.synced

    @property
    def lists(self) -> int:
        return self.reflector.lists

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(o) for _, o in sorted(self._items.items())]

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._items.get(key)
            return copy.deepcopy(found) if found is not None else None

    def start(self, stop: threading.Event) -> Informer:
        self.reflector.start(stop)
        return self

    def _replace(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._items = {object_key(o): o for o in items}
        self.on_change(self.plural)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._items.pop(key, None)
            else:
                self._items[key] = obj
        self.on_change(self.plural)
