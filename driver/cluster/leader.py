"""Leader election on a coordination.k8s.io/v1 Lease, so of several replicas only one acts as leader.

Used by the strategy controller (only the leader plans and writes) and by the legacy scheduler extender
(only the leader deletes the records of finished pods; every replica answers filter, prioritize and bind
from state re-read from the API, so a replica called while another leads still never over-commits).

A replica leads while it holds the Lease: it creates it, or takes it over once the holder has not renewed
it for `leaseDurationSeconds`, and renews it every `renew_s`. Every write carries the Lease's
resourceVersion, so of two replicas racing for it one gets Conflict and stays a follower. A leader that
cannot renew stops acting as leader at the latest `lease_s - renew_s` after its last renewal (counted
from before the read), before any other replica may take the Lease over (it waits the full duration
after the last renewal it saw).

The controller's and the extender's copies this replaces differed; the shared one keeps the stricter
choice of each: a round that fails (an API error, a lost race, a create that finds the Lease there) ends
the leadership at once, as the extender did (the controller kept it until the deadline above); a holder's
Lease counts as held up to and including `renewTime + leaseDurationSeconds`; Lease spec fields this
elector does not set are kept on renewal; a Lease whose renewTime cannot be read counts as expired
instead of ending the controller's election thread.

The Lease is read and written through a `LeaseStore` (`get_lease`, `create_lease`, `update_lease`): the
legacy `LegacyApi` is one; `ObjectLeases` makes one of an `ObjectApi`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from driver.cluster.base import ClusterError, Conflict, NotFound, ObjectApi
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)


class LeaseStore(Protocol):
    def get_lease(self, namespace: str, name: str) -> dict[str, Any]: ...  # raises NotFound
    def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ObjectLeases:
    """An `ObjectApi` seen as a `LeaseStore`."""

    api: ObjectApi

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return self.api.get_object("leases", name, namespace)

    def create_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.api.create_object("leases", obj)

    def update_lease(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.api.update_object("leases", obj)


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch, or None for a missing or unreadable time."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    def __init__(
        self,
        store: LeaseStore,
        namespace: str,
        name: str,
        identity: str,
        lease_s: int = 15,
        renew_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if renew_s >= lease_s:
            raise ValueError(
                f"leader election: renew interval {renew_s}s must be shorter than the lease {lease_s}s"
            )
        self.store, self.namespace, self.name, self.identity = store, namespace, name, identity
        self.lease_s, self.renew_s = lease_s, renew_s
        self.clock, self.monotonic = clock, monotonic
        self._valid_until = 0.0
        self._held = False  # the last round ended leading (for the leader.lost event)

    @property
    def is_leader(self) -> bool:
        return self.monotonic() < self._valid_until

    def _spec(self, now: float, acquired: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_s,
            "acquireTime": micro_time(acquired),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    def try_acquire(self) -> bool:
        """One round: take or renew the Lease if it is free, expired or ours. True when this replica leads
        afterwards."""
        started = self.monotonic()
        now = self.clock()
        lease = f"{self.namespace}/{self.name}"
        try:
            try:
                current = self.store.get_lease(self.namespace, self.name)
            except NotFound:
                current = None
            if current is None:
                self.store.create_lease(
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(now, now, 0),
                    }
                )
                previous = "none"
            else:
                spec = current.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                renewed = parse_time(spec.get("renewTime"))
                duration = int(spec.get("leaseDurationSeconds") or self.lease_s)
                if holder and holder != self.identity and renewed is not None and renewed + duration >= now:
                    return self._lose()
                mine = holder == self.identity
                transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
                acquired = (parse_time(spec.get("acquireTime")) or now) if mine else now
                # Fields this elector does not know (newer API versions add some) are kept.
                self.store.update_lease(
                    {**current, "spec": {**spec, **self._spec(now, acquired, transitions)}}
                )
                previous = "" if mine else holder or "none"
        except Conflict:
            return self._lose()  # another replica (or a person) wrote the Lease first
        except ClusterError as e:
            event(log, logging.WARNING, "leader.renew-failed", lease=lease, error=f"{type(e).__name__}: {e}")
            return self._lose()  # whether the write landed is unknown: do not act on it
        if previous:
            event(
                log, logging.INFO, "leader.acquired", lease=lease, identity=self.identity, previous=previous
            )
        self._valid_until = started + self.lease_s - self.renew_s
        self._held = True
        return True

    def _lose(self) -> bool:
        if self._held:
            event(
                log,
                logging.WARNING,
                "leader.lost",
                lease=f"{self.namespace}/{self.name}",
                identity=self.identity,
            )
        self._valid_until, self._held = 0.0, False
        return False

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            now_leader = self.try_acquire()
            stop.wait(self.renew_s if now_leader else min(self.renew_s, 2.0))
