"""Leader election on a coordination.k8s.io/v1 Lease, so two controller replicas never both write.

A replica leads while it holds the Lease: it creates it, or takes it over once the holder has not
renewed it for `leaseDurationSeconds`, and renews it every `renew_s`. Every write carries the Lease's
resourceVersion, so of two replicas racing for it one gets Conflict and stays a follower. A leader that
cannot renew stops acting as leader `lease_s - renew_s` after its last renewal, before any other replica
may take the Lease over (it waits the full duration after the last renewal it saw).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from driver.cluster.base import ClusterError, Conflict, NotFound, ObjectApi
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LeaderElector:
    def __init__(
        self,
        api: ObjectApi,
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
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_s, self.renew_s = lease_s, renew_s
        self.clock, self.monotonic = clock, monotonic
        self._valid_until = 0.0

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

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this replica holds the Lease afterwards."""
        started = self.monotonic()
        now = self.clock()
        try:
            lease = self.api.get_object("leases", self.name, self.namespace)
        except NotFound:
            lease = None
        try:
            if lease is None:
                self.api.create_object(
                    "leases",
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(now, now, 0),
                    },
                )
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity") or ""
                renewed = parse_time(spec.get("renewTime"))
                duration = int(spec.get("leaseDurationSeconds") or self.lease_s)
                if holder and holder != self.identity and renewed + duration > now:
                    self._valid_until = 0.0
                    return False
                mine = holder == self.identity
                transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
                acquired = parse_time(spec.get("acquireTime")) if mine else now
                self.api.update_object("leases", {**lease, "spec": self._spec(now, acquired, transitions)})
                if not mine:
                    event(
                        log,
                        logging.INFO,
                        "leader.acquired",
                        lease=f"{self.namespace}/{self.name}",
                        identity=self.identity,
                        previous=holder or "none",
                    )
        except Conflict:
            return self.is_leader  # another replica wrote first; what we held before still stands
        except ClusterError as e:
            event(
                log,
                logging.WARNING,
                "leader.renew-failed",
                lease=f"{self.namespace}/{self.name}",
                error=f"{type(e).__name__}: {e}",
            )
            return self.is_leader
        self._valid_until = started + self.lease_s - self.renew_s
        return True

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            was = self.is_leader
            now_leader = self.try_acquire_or_renew()
            if was and not now_leader:
                event(
                    log,
                    logging.WARNING,
                    "leader.lost",
                    lease=f"{self.namespace}/{self.name}",
                    identity=self.identity,
                )
            stop.wait(self.renew_s if now_leader else min(self.renew_s, 2.0))
