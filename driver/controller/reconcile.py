"""The reconciler of `carve controller`: informers feed the planner; its changes become NodePartitioning
specs and Events on the claims they were made for.

It plans when something it watches changed (debounced) and every `interval_s` (pending claims age past
the grace period, hysteresis holds expire), and only while it leads (leader.py). A failed write is counted,
logged and retried at the next plan; the planner itself sees a GPU whose desired strategy is not yet
published as in flight, so a plan never stacks a second change on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.partitioning import (
    PartitioningError,
    PartitioningPolicySpec,
    parse_policy,
)
from driver.cluster.base import ClusterError, NotFound, ObjectApi
from driver.cluster.informer import Informer
from driver.controller.inputs import build_input, uncounted_shares, updated_partitioning
from driver.controller.layout import LIVE_SEARCH_BUDGET, Layout, SimulateError, choose_layout
from driver.controller.metrics import ControllerMetrics
from driver.controller.nodes import NodeState
from driver.controller.observed import ClaimLog
from driver.controller.planner import Change, Plan, Planner
from driver.devices import Settings
from driver.devices.rules import StrategyRules
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)

WATCHED = (
    "resourceclaims",
    "resourceslices",
    "deviceclasses",
    "nodepartitionings",
    "partitioningpolicies",
    "nodes",
    "namespaces",
)
EVENT_REASON = "GPUStrategyChange"
EVENT_NAMESPACE_CLUSTER = "default"  # where Events about cluster-scoped objects (Nodes) go, as kubectl looks
NODE_EVENT_MAX = 1024  # characters of a Node Event's message (several GPUs' reasons)
INVALID_REASON = "InvalidClaim"  # a pending claim the planner leaves out (inputs.claim_problem)


def claim_pods(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, uid) of the pods a claim is for: its owning pod (a claim made from a pod's template) and the
    pods in status.reservedFor, each once, in that order."""
    found = [
        (ref["name"], ref.get("uid", ""))
        for ref in (claim.get("metadata") or {}).get("ownerReferences") or []
        if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("name")
    ] + [
        (ref["name"], ref.get("uid", ""))
        for ref in (claim.get("status") or {}).get("reservedFor") or []
        if ref.get("resource") == "pods" and not ref.get("apiGroup") and ref.get("name")
    ]
    return list(dict.fromkeys(found))


@dataclass
class ReconcilerConfig:
    policy_name: str = "default"
    interval_s: float = 30.0
    grace_s: float = 10.0
    resync_s: float = 600.0
    debounce_s: float = 0.2
    max_changes: int = 64
    identity: str = "carve-controller"
    dry_run: bool = False  # plan and log, write nothing
    settings: Settings = field(default_factory=Settings)
    plugin_rules: StrategyRules | None = None  # the plugins' --strategy: pins and the home strategy
    # The home layout from the simulator's portfolio on the claims seen (layout.py); 0: never.
    layout_interval_s: float = 900.0
    layout_window_s: float = 24 * 3600.0
    layout_min_pods: int = 20  # pods seen before the layout is chosen: a handful of claims is no workload
    objective: str = "balanced"
    search_budget: int = LIVE_SEARCH_BUDGET


class Reconciler:
    def __init__(
        self,
        api: ObjectApi,
        config: ReconcilerConfig,
        metrics: ControllerMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.config = config
        self.metrics = metrics or ControllerMetrics()
        self.clock = clock
        self.planner = Planner(config.settings)
        self.dirty = threading.Event()
        self.informers = {p: Informer(api, p, self._changed, config.resync_s) for p in WATCHED}
        self.last_plan: Plan | None = None
        self.problems: list[str] = []
        self._reported: set[tuple[str, str]] = set()  # (uid, resourceVersion) of invalid claims with an Event
        self.claim_log = ClaimLog(config.layout_window_s)
        self.layout: Layout | None = None
        self._layout_at: float | None = None
        self._uncounted: set[str] = set()  # uncounted_shares lines already logged

    def _changed(self, plural: str) -> None:
        self.dirty.set()

    # ---- one round ------------------------------------------------------------------------------------

    def policy(self) -> PartitioningPolicySpec:
        obj = self.informers["partitioningpolicies"].get(f"/{self.config.policy_name}")
        if obj is None:
            return PartitioningPolicySpec()
        try:
            return parse_policy(obj)
        except PartitioningError as e:
            # A policy the API server admitted but carve cannot use: change nothing rather than guess.
            self.problems.append(str(e))
            return PartitioningPolicySpec(nodes=[])

    def reconcile_once(self) -> Plan:
        self.problems = []
        now = self.clock()
        policy = self.policy()
        node_objects = self.informers["nodes"].items()
        nodes = {o["metadata"]["name"]: (o["metadata"].get("labels") or {}) for o in node_objects}
        annotations = {o["metadata"]["name"]: (o["metadata"].get("annotations") or {}) for o in node_objects}
        isolated: frozenset[str] = frozenset()
        selector = policy.isolation.namespace_selector
        if selector is not None:
            isolated = frozenset(
                o["metadata"]["name"]
                for o in self.informers["namespaces"].items()
                if selector.matches(o["metadata"].get("labels") or {})
            )
        partitionings = {o["metadata"]["name"]: o for o in self.informers["nodepartitionings"].items()}
        invalid: list[tuple[dict, str]] = []
        inp, problems = build_input(
            self.informers["resourceslices"].items(),
            self.informers["deviceclasses"].items(),
            self.informers["resourceclaims"].items(),
            partitionings,
            policy,
            now,
            nodes,
            isolated,
            self.config.settings,
            self.config.grace_s,
            self.config.plugin_rules,
            annotations,
            invalid,
        )
        self.problems += problems
        self._report_invalid(invalid)
        self._warn_uncounted()
        self._relayout(inp.nodes, policy, now)
        extra: dict[str, Any] = {}
        if self.layout is not None:
            extra = {"homes": self.layout.homes, "homes_why": f"portfolio: {self.layout.why}"}
        inp = type(inp)(**{**inp.__dict__, "max_changes": self.config.max_changes, **extra})
        started = time.perf_counter()
        plan = self.planner.plan(inp)
        self.metrics.observe_plan(time.perf_counter() - started, plan.pending_by_reason())
        for problem in self.problems:
            event(log, logging.WARNING, "controller.bad-object", error=problem)
        by_node: dict[str, list[Change]] = {}
        for c in plan.changes:
            by_node.setdefault(c.node, []).append(c)
        states = {n.name: n for n in inp.nodes}
        for node, changes in sorted(by_node.items()):
            state = states[node]
            # GPUs pinned by rules or the node annotation get no entry (the plugin would ignore it);
            # entries the admin pinned are kept as written.
            unpinned = {i: s for i, s in state.strategies.items() if i not in state.pinned_indices}
            if self._write(node, partitionings.get(node), changes, unpinned, now):
                self._announce(changes)
                self._announce_node(node, changes)
        self.last_plan = plan
        return plan

    def _warn_uncounted(self) -> None:
        """A warning log line, once per claim, for shares the scheduler counts nothing for (an upgrade
        from a carve whose time-sliced GPUs published no capacity, inputs.uncounted_shares)."""
        for line in uncounted_shares(self.informers["resourceslices"].items(),
                                     self.informers["resourceclaims"].items()):
            if line not in self._uncounted:
                self._uncounted.add(line)
                event(log, logging.WARNING, "controller.uncounted-share", problem=line)

    def _relayout(self, nodes: list[NodeState], policy: PartitioningPolicySpec, now: float) -> None:
        """Every `layout_interval_s`: the home layout the portfolio picks on the claims seen so far (the
        model of `carve simulate --strategy auto`). The claim log is updated on every round."""
        self.claim_log.update(self.informers["resourceclaims"].items(), now)
        interval = self.config.layout_interval_s
        if interval <= 0 or (self._layout_at is not None and now - self._layout_at < interval):
            return
        trace = self.claim_log.trace(now)
        if len(trace) < self.config.layout_min_pods:
            return
        self._layout_at = now
        started = time.perf_counter()
        try:
            # The simulation works on its own copies: the round's node states stay untouched.
            layout = choose_layout(nodes, trace, policy, self.config.settings,
                                   self.config.objective, self.config.search_budget)
        except SimulateError as e:
            self.problems.append(f"home layout: {e}")
            return
        if layout is None:
            return
        changed = self.layout is None or self.layout.homes != layout.homes
        self.layout = layout
        event(log, logging.INFO, "controller.layout", choice=layout.choice, pods=layout.pods,
              changed=changed, seconds=round(time.perf_counter() - started, 3), why=layout.why)

    def _write(
        self,
        node: str,
        current: dict[str, Any] | None,
        changes: list[Change],
        strategies: dict[int, str],
        now: float,
    ) -> bool:
        obj = updated_partitioning(node, current, changes, strategies, now)
        if self.config.dry_run:
            return False
        try:
            if current is None:
                self.api.create_object("nodepartitionings", obj)
            else:
                self.api.update_object("nodepartitionings", obj)
        except (ClusterError, NotFound) as e:
            self.metrics.write_errors.inc()
            event(
                log, logging.WARNING, "controller.write-failed", node=node, error=f"{type(e).__name__}: {e}"
            )
            self.dirty.set()
            return False
        for c in changes:
            self.metrics.changes.labels(strategy=c.to_strategy).inc()
            event(
                log,
                logging.INFO,
                "controller.change",
                node=node,
                gpu=c.index,
                uuid=c.uuid,
                strategy=f"{c.from_strategy}->{c.to_strategy}",
                reason=c.reason,
            )
        return True

    def _announce(self, changes: list[Change]) -> None:
        """One Event per claim a change was made for, on that claim and on each pod it is for (the pod
        that owns it, as for claims made from a template, or that reserved it): `kubectl describe pod`
        then says why the pod waits. The pods come from the claim itself: nothing more is read."""
        seen: set[str] = set()
        for c in changes:
            for key in c.claims:
                if key in seen:
                    continue
                seen.add(key)
                claim = self.informers["resourceclaims"].get(key)
                if claim is None:
                    continue
                meta = claim["metadata"]
                message = "; ".join(sorted({x.reason for x in changes if key in x.claims}))
                involved = [
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "uid": meta.get("uid", ""),
                    }
                ] + [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": name,
                        "namespace": meta["namespace"],
                        "uid": uid,
                    }
                    for name, uid in claim_pods(claim)
                ]
                for obj in involved:
                    self._event(key, obj, message)

    def _announce_node(self, node: str, changes: list[Change]) -> None:
        """One Event on the Node for each plan that changed its GPUs, consolidation included (which has no
        claim to tell): `kubectl describe node` and `kubectl get events` show each GPU's move and the
        reason with the score that won. Cluster-scoped involved object: the Event goes to `default`."""
        text = "; ".join(f"GPU {c.index} {c.from_strategy}->{c.to_strategy}: {c.reason}" for c in changes)
        involved = {"apiVersion": "v1", "kind": "Node", "name": node, "namespace": ""}
        self._event(f"node/{node}", involved, text[:NODE_EVENT_MAX], namespace=EVENT_NAMESPACE_CLUSTER)

    def _report_invalid(self, invalid: list[tuple[dict, str]]) -> None:
        """A Warning Event on each malformed pending claim, once per version of it (rounds repeat)."""
        current: set[tuple[str, str]] = set()
        for claim, message in invalid:
            meta = claim.get("metadata") or {}
            name, namespace = meta.get("name"), meta.get("namespace")
            if not isinstance(name, str) or not isinstance(namespace, str) or not name or not namespace:
                continue
            version = (str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))
            current.add(version)
            if version in self._reported:
                continue
            involved = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "name": name,
                        "namespace": namespace, "uid": version[0]}
            self._event(f"{namespace}/{name}", involved, message, INVALID_REASON, "Warning")
        self._reported = current

    def _event(self, key: str, involved: dict[str, str], message: str, reason: str = EVENT_REASON,
               kind: str = "Normal", namespace: str | None = None) -> None:
        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.",
                         "namespace": namespace or involved["namespace"]},
            "involvedObject": involved,
            "reason": reason,
            "type": kind,
            "message": message,
            "source": {"component": "carve-controller"},
            "reportingComponent": "carve.dev/controller",
            "reportingInstance": self.config.identity,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            self.api.create_object("events", body)
        except ClusterError as e:  # an Event is a courtesy: never fail the plan for it
            event(log, logging.WARNING, "controller.event-failed", claim=key, error=str(e))

    # ---- the loop -------------------------------------------------------------------------------------

    def start_informers(self, stop: threading.Event, timeout_s: float = 60.0) -> bool:
        for informer in self.informers.values():
            informer.start(stop)
        deadline = time.monotonic() + timeout_s
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.informers.values())

    def run(self, stop: threading.Event, is_leader: Callable[[], bool] = lambda: True) -> None:
        """Plan on changes (debounced) and every interval while leading, until `stop`."""
        while not stop.is_set():
            self.dirty.wait(self.config.interval_s)
            if stop.is_set():
                break
            stop.wait(self.config.debounce_s)  # let a burst of events settle into one plan
            self.dirty.clear()
            if not is_leader():
                self.dirty.set()  # plan as soon as this replica leads: look again in a second
                stop.wait(1.0)
                continue
            try:
                self.reconcile_once()
            except Exception as e:  # a bug must not end the controller; the next round retries
                event(
                    log,
                    logging.ERROR,
                    "controller.plan-failed",
                    exc_info=True,
                    error=f"{type(e).__name__}: {e}",
                )
