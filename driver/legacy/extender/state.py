"""The extender's view of the cluster: each node's GPUs and the trusted assignments that use them.

Rebuilt from the API server (node annotations and the assignment ConfigMaps) at start and every resync, so a
restarted or newly elected extender continues where the last one stopped. Usage is derived from the
assignment records only: a pod's own annotations never count (a tenant could write them). Reads
(filter, prioritize) work on a snapshot; bind reserves under a per-node lock after re-reading that node's
records, so concurrent binds never over-commit a GPU.
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
        self._gone: set[str] = set()  # uids whose pod is gone, their records not yet collected (drop_gone)
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

    def drop_gone(self, node: str) -> int:
        """Drop the node's assignments whose pod is gone or finished (one pod read each); returns how many.

        Called when a pod does not fit. The records of deleted pods stay until the leader's next resync
        collects them, and the scheduler does not retry a pod the extender turned down until a pod or
        node changes (or 5 minutes pass): a pod pending for a share that was just freed would otherwise
        wait that long. No caching: a pod deleted a moment after any earlier look must count as gone at
        the scheduler's next try, which that deletion triggers. A terminating pod still holds its share.
        """
        with self._lock:
            candidates = list(self._by_node.get(node, {}).values())
        states = {a.uid: self._pod_state(a) for a in candidates}
        event(log, logging.DEBUG, "recheck.done", node=node, pods=sorted(states.items()))
        with self._lock:
            for uid in [u for u, st in states.items() if st == "gone"]:
                self._gone.add(uid)
                self._drop(uid)
        return sum(st == "gone" for st in states.values())

    def refresh_node(self, node: str) -> None:
        """Re-read one node's inventory and records (call under node_lock, before reserving on it)."""
        self._set_node(node, self._read_node(node))
        records = self._records(f"{names.LEGACY_RECORD_NODE_LABEL}={node}")
        with self._lock:
            for uid in [u for u in self._by_node.get(node, {}) if u not in records]:
                self._drop(uid)
            for a in records.values():
                self._drop(a.uid)
                if a.uid in self._gone:
                    continue
                self.assignments[a.uid] = a
                self._by_node.setdefault(a.node, {})[a.uid] = a
            self._usage.pop(node, None)

    def resync(self, collect: bool = False) -> None:
        """Rebuild everything from the API. `collect`: also delete records of pods that are gone or done
        (only the leader does, so two replicas never race on deletes)."""
        nodes = {}
        for n in self.api.list_nodes():
            name = n["metadata"]["name"]
            try:
                nodes[name] = (parse_node_gpus(n), "")
            except RecordError as e:
                nodes[name] = (None, str(e))
        records = self._records(f"{names.LEGACY_RECORD_LABEL}=true")
        pods = {(p.get("metadata") or {}).get("uid"): p for p in self.api.list_pods()}
        for uid, a in list(records.items()):
            pod = pods.get(uid)
            if pod is not None and (pod.get("status") or {}).get("phase") not in TERMINAL:
                continue
            if pod is None and self._pod_state(a) != "gone":
                continue  # bound a moment ago, or bind still in flight
            del records[uid]
            if collect:
                self.forget(a)
        with self._lock:
            self.nodes = {k: v for k, (v, _e) in nodes.items()}
            self.node_errors = {k: e for k, (_v, e) in nodes.items() if e}
            self.assignments = records
            self._by_node = {}
            self._usage = {}
            self._gone = set()
            for a in records.values():
                self._by_node.setdefault(a.node, {})[a.uid] = a
            self.synced = True

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

    def _pod_state(self, a: Assignment) -> str:
        """ "gone" (deleted, recreated under another uid, or finished), "terminating" or "alive"."""
        try:
            pod = self.api.get_pod(a.namespace, a.name)
        except NotFound:
            return "gone"
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if meta.get("uid") != a.uid or status.get("phase") in TERMINAL:
            return "gone"
        return "terminating" if meta.get("deletionTimestamp") else "alive"

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
        out = {}
        for obj in self.api.list_configmaps(self.namespace, selector):
            try:
                a = parse_record(obj)
            except RecordError as e:
                event(log, logging.WARNING, "record.unreadable", error=str(e))
                continue
            out[a.uid] = a
        return out


__all__ = ["ExtenderState", "NodeView", "record_name"]
