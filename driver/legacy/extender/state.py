"""The extender's view of the cluster: each node's GPUs and the trusted assignments that use them.

Built from the API server (node annotations and the assignment ConfigMaps): the extender's informers
(informer.py) list each collection, then apply its watch events (`replace_*`, `*_event`); `resync` rebuilds
everything in one pass. So a restarted or newly elected extender continues where the last one stopped.
Usage is derived from the assignment records only: a pod's own annotations never count (a tenant could
write them). Reads (filter, prioritize) work on a snapshot; bind reserves under a per-node lock after
re-reading that node's records, so concurrent binds never over-commit a GPU.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from driver import names
from driver.cluster.base import ClusterError, NotFound
from driver.legacy.fit import Usage, usage_of
from driver.legacy.kubeapi import LegacyApi
from driver.legacy.records import (
    Assignment,
    NodeGpus,
    RecordError,
    parse_node_gpus,
    parse_record,
    record_name,
)
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeView:
    gpus: NodeGpus | None
    usage: dict[str, Usage]
    error: str = ""  # why the inventory could not be read


class ExtenderState:
    def __init__(self, api: LegacyApi, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self._lock = threading.Lock()
        self._node_locks: dict[str, threading.Lock] = {}
        self.nodes: dict[str, NodeGpus | None] = {}
        self.node_errors: dict[str, str] = {}
        self.assignments: dict[str, Assignment] = {}  # pod uid -> assignment
        self._by_node: dict[str, dict[str, Assignment]] = {}  # node -> uid -> assignment (the same values)
        self._usage: dict[str, dict[str, Usage]] = {}  # node -> its usage, until an assignment there changes
        self._done: set[str] = set()  # uids of pods seen deleted or finished: their records never count
        self.synced = False

    # --- reads -----------------------------------------------------------------------------------------

    def view(self, node: str, exclude_uid: str = "") -> NodeView:
        with self._lock:
            on_node = self._by_node.get(node, {})
            if exclude_uid in on_node:
                usage = usage_of(a for a in on_node.values() if a.uid != exclude_uid)
            else:
                usage = self._usage.get(node)
                if usage is None:
                    usage = self._usage[node] = usage_of(on_node.values())
            return NodeView(self.nodes.get(node), usage, self.node_errors.get(node, ""))

    def assignment(self, uid: str) -> Assignment | None:
        with self._lock:
            return self.assignments.get(uid)

    # --- writes ----------------------------------------------------------------------------------------

    @contextmanager
    def node_lock(self, node: str):
        with self._lock:
            lock = self._node_locks.setdefault(node, threading.Lock())
        with lock:
            yield

    def add(self, a: Assignment) -> None:
        with self._lock:
            self._drop(a.uid)
            self.assignments[a.uid] = a
            self._by_node.setdefault(a.node, {})[a.uid] = a
            self._usage.pop(a.node, None)

    def drop(self, uid: str) -> None:
        with self._lock:
            self._drop(uid)

    def _drop(self, uid: str) -> None:
        old = self.assignments.pop(uid, None)
        if old is not None:
            self._by_node.get(old.node, {}).pop(uid, None)
            self._usage.pop(old.node, None)

    def refresh_node(self, node: str) -> None:
        """Re-read one node's inventory and records (call under node_lock, before reserving on it)."""
        self._set_node(node, self._read_node(node))
        records = self._records(f"{names.LEGACY_RECORD_NODE_LABEL}={node}")
        with self._lock:
            for uid in [u for u in self._by_node.get(node, {}) if u not in records]:
                self._drop(uid)
            for a in records.values():
                self._drop(a.uid)
                if a.uid in self._done:
                    continue
                self.assignments[a.uid] = a
                self._by_node.setdefault(a.node, {})[a.uid] = a
            self._usage.pop(node, None)

    def confirm_holders(self, node: str) -> int:
        """Drop the assignments on `node` whose pods are gone or finished, read live from the API (not the
        records: only the leader deletes those). The pod informer drops them too, a moment later; but the
        scheduler requeues a pending pod on the very delete event that frees a share and may ask before our
        watch has it. Refused then, the pod waits for some other cluster event or the scheduler's 5-minute
        flush. Filter calls this only for nodes it is about to refuse for lack of share. Returns how many."""
        with self._lock:
            held = list(self._by_node.get(node, {}).values())
        if not held:
            return 0
        live = {(p.get("metadata") or {}).get("uid"): p for p in self.api.list_pods(node)}
        gone = []
        for a in held:
            pod = live.get(a.uid)
            if pod is not None:
                if (pod.get("status") or {}).get("phase") in TERMINAL:
                    gone.append(a)
            elif not self._pod_alive_unscheduled(a):  # not bound yet (bind in flight) keeps its share
                gone.append(a)
        with self._lock:
            for a in gone:
                self._done.add(a.uid)
                self._drop(a.uid)
        for a in gone:
            event(
                log,
                logging.INFO,
                "share.freed-on-confirm",
                pod=f"{a.namespace}/{a.name}",
                uid=a.uid,
                node=node,
            )
        return len(gone)

    def resync(self, collect: bool = False) -> None:
        """Rebuild everything from the API. `collect`: also delete records of pods that are gone or done
        (only the leader does, so two replicas never race on deletes)."""
        nodes = {n["metadata"]["name"]: _inventory(n) for n in self.api.list_nodes()}
        records = self._records(f"{names.LEGACY_RECORD_LABEL}=true")
        for a in self._stale(records):
            del records[a.uid]
            if collect:
                self.forget(a)
        with self._lock:
            self.nodes = {k: v for k, (v, _e) in nodes.items()}
            self.node_errors = {k: e for k, (_v, e) in nodes.items() if e}
            self.assignments = records
            self._by_node = {}
            self._usage = {}
            for a in records.values():
                self._by_node.setdefault(a.node, {})[a.uid] = a
            self.synced = True

    # --- informer events (driver/cluster/informer.py Reflector) ----------------------------------------

    def replace_nodes(self, items: list[dict]) -> None:
        nodes = {n["metadata"]["name"]: _inventory(n) for n in items}
        with self._lock:
            self.nodes = {k: v for k, (v, _e) in nodes.items()}
            self.node_errors = {k: e for k, (_v, e) in nodes.items() if e}

    def node_event(self, kind: str, obj: dict) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            with self._lock:
                self.nodes.pop(name, None)
                self.node_errors.pop(name, None)
            return
        self._set_node(name, _inventory(obj))

    def replace_records(self, items: list[dict]) -> None:
        records = {a.uid: a for a in map(_record, items) if a is not None}
        with self._lock:
            self.assignments = {u: a for u, a in records.items() if u not in self._done}
            self._by_node, self._usage = {}, {}
            for a in self.assignments.values():
                self._by_node.setdefault(a.node, {})[a.uid] = a
            self._done &= set(records)  # a done pod's uid is kept only while its record exists

    def record_event(self, kind: str, obj: dict) -> None:
        a = _record(obj)
        if a is None:
            return
        with self._lock:
            if kind == "DELETED" or a.uid in self._done:
                self._drop(a.uid)
                return
            self._drop(a.uid)
            self.assignments[a.uid] = a
            self._by_node.setdefault(a.node, {})[a.uid] = a
            self._usage.pop(a.node, None)

    def replace_pods(self, items: list[dict]) -> None:
        """Pods listed (scheduled ones): finished pods free their GPUs. A record whose pod is not listed at
        all is left to the leader's collection (its pod may have been bound a moment ago)."""
        for pod in items:
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                self.pod_event("MODIFIED", pod)

    def pod_event(self, kind: str, obj: dict) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        if kind == "DELETED" or (obj.get("status") or {}).get("phase") in TERMINAL:
            with self._lock:
                self._done.add(uid)
                self._drop(uid)

    def collect(self) -> int:
        """Delete the records of pods that are gone or finished (the leader's job; the informers keep the
        rest of the state). Returns how many."""
        stale = self._stale(self._records(f"{names.LEGACY_RECORD_LABEL}=true"))
        for a in stale:
            self.forget(a)
        return len(stale)

    def _stale(self, records: dict[str, Assignment]) -> list[Assignment]:
        pods = {(p.get("metadata") or {}).get("uid"): p for p in self.api.list_pods()}
        out = []
        for uid, a in records.items():
            pod = pods.get(uid)
            if pod is not None and (pod.get("status") or {}).get("phase") not in TERMINAL:
                continue
            if pod is None and self._pod_alive_unscheduled(a):
                continue  # bound a moment ago, or bind still in flight
            out.append(a)
        return out

    def forget(self, a: Assignment) -> None:
        try:
            self.api.delete_configmap(self.namespace, a.record_name)
            event(
                log, logging.INFO, "record.collected", pod=f"{a.namespace}/{a.name}", uid=a.uid, node=a.node
            )
        except NotFound:
            pass
        except ClusterError as e:
            event(log, logging.WARNING, "record.collect-failed", uid=a.uid, error=str(e))
        self.drop(a.uid)

    # --- helpers ---------------------------------------------------------------------------------------

    def _pod_alive_unscheduled(self, a: Assignment) -> bool:
        try:
            pod = self.api.get_pod(a.namespace, a.name)
        except NotFound:
            return False
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        return meta.get("uid") == a.uid and status.get("phase") not in TERMINAL

    def _read_node(self, node: str) -> tuple[NodeGpus | None, str]:
        try:
            return parse_node_gpus(self.api.get_node(node)), ""
        except NotFound:
            return None, f"node {node} does not exist"
        except RecordError as e:
            return None, str(e)

    def _set_node(self, node: str, got: tuple[NodeGpus | None, str]) -> None:
        with self._lock:
            self.nodes[node] = got[0]
            if got[1]:
                self.node_errors[node] = got[1]
            else:
                self.node_errors.pop(node, None)

    def _records(self, selector: str) -> dict[str, Assignment]:
        records = (_record(obj) for obj in self.api.list_configmaps(self.namespace, selector))
        return {a.uid: a for a in records if a is not None}


def _inventory(node: dict) -> tuple[NodeGpus | None, str]:
    try:
        return parse_node_gpus(node), ""
    except RecordError as e:
        return None, str(e)


def _record(obj: dict) -> Assignment | None:
    try:
        return parse_record(obj)
    except RecordError as e:
        event(log, logging.WARNING, "record.unreadable", error=str(e))
        return None


__all__ = ["ExtenderState", "NodeView", "record_name"]
