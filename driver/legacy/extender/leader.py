"""Leader election on a coordination.k8s.io/v1 Lease, for two or more extender replicas.

Only the leader deletes the records of finished pods; every replica answers filter, prioritize and bind
from state it re-reads from the API (bind re-reads the node's records under its lock), so a replica that
is called while the other leads still never over-commits. Writes carry the Lease's resourceVersion, so two
candidates can never both take it.
"""

from __future__ import annotations

import datetime
import logging
import threading

from driver.cluster.base import AlreadyExists, ClusterError, Conflict, NotFound
from driver.legacy.kubeapi import LegacyApi
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _fmt(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


class LeaderElector:
    def __init__(self, api: LegacyApi, namespace: str, name: str, identity: str, lease_s: int = 15) -> None:
        self.api, self.namespace, self.name, self.identity, self.lease_s = (
            api,
            namespace,
            name,
            identity,
            lease_s,
        )
        self.leading = threading.Event()

    def try_acquire(self) -> bool:
        """One round: take or renew the lease if it is free, expired or ours. Returns whether we lead."""
        now = _now()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_s,
            "renewTime": _fmt(now),
        }
        try:
            lease = self.api.get_lease(self.namespace, self.name)
        except NotFound:
            obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**spec, "acquireTime": _fmt(now)},
            }
            try:
                self.api.create_lease(obj)
                return self._set(True)
            except (AlreadyExists, ClusterError):
                return self._set(False)
        except ClusterError as e:
            event(log, logging.WARNING, "leader.read-failed", error=str(e))
            return self._set(False)
        held = lease.get("spec") or {}
        renewed = _parse(held.get("renewTime"))
        duration = int(held.get("leaseDurationSeconds") or self.lease_s)
        mine = held.get("holderIdentity") == self.identity
        expired = renewed is None or (now - renewed).total_seconds() > duration
        if not mine and not expired and held.get("holderIdentity"):
            return self._set(False)
        lease["spec"] = {**held, **spec}
        if not mine:
            lease["spec"]["acquireTime"] = _fmt(now)
            lease["spec"]["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
        try:
            self.api.update_lease(lease)
            return self._set(True)
        except (Conflict, ClusterError):
            return self._set(False)

    def _set(self, leading: bool) -> bool:
        if leading and not self.leading.is_set():
            event(
                log,
                logging.INFO,
                "leader.acquired",
                lease=f"{self.namespace}/{self.name}",
                identity=self.identity,
            )
        if not leading and self.leading.is_set():
            event(
                log,
                logging.WARNING,
                "leader.lost",
                lease=f"{self.namespace}/{self.name}",
                identity=self.identity,
            )
        (self.leading.set if leading else self.leading.clear)()
        return leading
