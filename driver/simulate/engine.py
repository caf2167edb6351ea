"""The discrete-event loop of `carve simulate`: arrivals, placement, departures, retries.

Rules (docs/simulate.md explains them to users):
- Events are processed in time order; at one instant departures go before arrivals, so capacity freed
  at t is available to a pod arriving at t. Ties keep trace order.
- An arriving pod first checks whether it could fit on an empty node of any shape in the cluster; if
  not it can never run and is counted in pods_never_scheduled at once, without waiting.
- Otherwise it tries nodes in the node policy's order; the first node on which every claim of the pod
  allocates (the real allocator, stateful per node) takes it. All of a pod's claims go to one node.
- A pod that fits nowhere waits. When a pod leaves a node, only that node gained capacity, so the
  waiting pods retry on that node, oldest first. New arrivals are not held behind waiting pods (the
  scheduler's queue does not block on an unschedulable pod either).
- A pod runs for its duration from the moment it is placed, at the compute it asked for, unless it holds a
  device without a compute quota (time-slicing): the holders of one such GPU take turns on it, so when
  their demands add up to more than the GPU (sum of cores > 100%) each runs at 100/sum of its speed and
  its duration stretches (processor sharing, re-rated whenever a holder comes or goes). A pod on several
  such GPUs runs at the pace of its slowest. Pods still waiting when no event is left are never scheduled.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from driver.allocator import Unallocatable
from driver.allocator.quantity import of as quantity_of
from driver.simulate.auto import AutoPlanner
from driver.simulate.cluster import DeviceCost, SimCluster, SimNode
from driver.simulate.demand import lower_bound_gpus, pod_demand
from driver.simulate.inputs import SimulateError, TracePod
from driver.simulate.policies import NodePolicy

_DEPART, _ARRIVE = 0, 1
NAMESPACE = "simulate"


@dataclass
class Placement:
    """Where and when a pod ran, and what it got."""

    node: str
    start: float
    devices: list[str]  # "<request>=<device>" per allocation result, claims in order
    end: float | None = None  # when it left (start + duration, stretched where it took turns)


@dataclass
class SimResult:
    strategy: str
    node_policy: str
    gpus_total: int
    peak_gpus_busy: int
    gpu_hours_busy: float
    pods_total: int
    pods_scheduled: int
    pods_never_scheduled: int
    mean_wait_s: float
    lower_bound_gpus: int
    packing_ratio: float | None
    max_wait_s: float = 0.0
    pods_never_fit: int = 0  # part of pods_never_scheduled: no empty node could take them
    never_fit_reasons: dict[str, str] = field(default_factory=dict, repr=False)  # pod -> allocator's reason
    gpus_by_strategy: dict[str, int] = field(default_factory=dict)
    strategy_changes: int | None = None  # under auto: GPUs the planner switched
    planner_runs: int | None = None  # under auto: times the planner ran
    placements: dict[str, Placement] = field(default_factory=dict, repr=False)
    # For the HTML report (report_html.py): samples over time and each scheduled pod's wait.
    timeline: Timeline | None = field(default=None, repr=False)
    waits: list[float] = field(default_factory=list, repr=False)
    # Run time over duration, mean over scheduled pods (> 1: time-sliced pods that got less compute).
    mean_stretch: float = 1.0
    p99_wait_s: float = 0.0
    mean_extra_run_s: float = 0.0  # mean over scheduled pods of run time - duration (time-slicing)
    p99_delay_s: float = 0.0  # p99 over scheduled pods of wait + extra run time
    # Under auto: the candidate that won and why (driver/controller/score.py), and every candidate's figures.
    auto_choice: str | None = None
    auto_why: str | None = None
    candidates: list[Any] = field(default_factory=list, repr=False)
    candidate_results: dict[str, SimResult] = field(default_factory=dict, repr=False)  # auto: every run

    @property
    def mean_delay_s(self) -> float:
        return self.mean_wait_s + self.mean_extra_run_s

    def report(self) -> dict[str, Any]:
        """The output keys, in the order the table prints them."""
        return {
            "strategy": self.strategy,
            "node_policy": self.node_policy,
            "gpus_total": self.gpus_total,
            "peak_gpus_busy": self.peak_gpus_busy,
            "gpu_hours_busy": round(self.gpu_hours_busy, 2),
            "pods_total": self.pods_total,
            "pods_scheduled": self.pods_scheduled,
            "pods_never_scheduled": self.pods_never_scheduled,
            "mean_wait_s": round(self.mean_wait_s, 1),
            "max_wait_s": round(self.max_wait_s, 1),
            "p99_wait_s": round(self.p99_wait_s, 1),
            "mean_stretch": round(self.mean_stretch, 3),
            "mean_delay_s": round(self.mean_delay_s, 1),
            "p99_delay_s": round(self.p99_delay_s, 1),
            "lower_bound_gpus": self.lower_bound_gpus,
            "packing_ratio": None if self.packing_ratio is None else round(self.packing_ratio, 3),
            "gpus_by_strategy": dict(self.gpus_by_strategy),
            **({"strategy_changes": self.strategy_changes} if self.strategy_changes is not None else {}),
            **({"planner_runs": self.planner_runs} if self.planner_runs is not None else {}),
            **({"auto_choice": self.auto_choice} if self.auto_choice is not None else {}),
            **({"auto_why": self.auto_why} if self.auto_why is not None else {}),
        }


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`, 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]


class Timeline:
    """(time s, GPUs busy, pods waiting, strategy changes so far) after each event, thinned to at most
    `limit` samples (every other one dropped when full, the stride doubled), so a million-pod trace costs
    the same memory as a small one and the shape of every curve survives."""

    def __init__(self, limit: int = 2048) -> None:
        self.limit = limit
        self.stride = 1
        self._seen = 0
        self.points: list[tuple[float, int, int, int]] = []

    def add(self, now: float, busy: int, waiting: int, changes: int) -> None:
        self._seen += 1
        if self._seen % self.stride:
            return
        if self.points and self.points[-1][0] == now:
            self.points[-1] = (now, busy, waiting, changes)  # several events at one instant: keep the last
            return
        self.points.append((now, busy, waiting, changes))
        if len(self.points) >= self.limit:
            self.points = self.points[::2]
            self.stride *= 2


@dataclass
class _Running:
    node: SimNode
    claims: list[tuple[str, list[dict[str, Any]]]]  # (claim uid, allocation results)
    fallback_cores: float
    # Processor sharing on time-sliced GPUs: work left (seconds at full speed), speed since `since`.
    work_left: float = 0.0
    rate: float = 1.0
    since: float = 0.0
    turns: list[tuple[str, str]] = field(default_factory=list)  # (node, GPU uuid) it takes turns on
    started: float = 0.0
    # The most of its own speed its devices' compute allows: below 1 where a device grants fewer SMs than
    # the pod needs (a MIG instance chosen by memory: 1/7 of the SMs for a pod that needs 40% of a GPU).
    cap: float = 1.0


def granted_cores(result: dict[str, Any], cost: DeviceCost) -> float | None:
    """Percent of a GPU's SMs one allocation result holds for itself: what a soft or MPS share consumed,
    a MIG instance's or slot's own share, 100 for a whole GPU; None on a time-sliced GPU (no quota: the
    holders take turns, share_rate)."""
    if cost.turns:
        return None
    consumed = result.get("consumedCapacity") or {}
    if "cores" in consumed:
        return float(quantity_of(consumed["cores"]).value)
    return cost.cores if cost.cores is not None else 100.0


def compute_cap(granted: Iterable[float | None], need_per_result: float) -> float:
    """A pod's speed limit from its quotas: the slowest device's granted/needed, at most 1. A pod
    whose need is unknown (0) is not slowed."""
    if need_per_result <= 0:
        return 1.0
    return min((min(1.0, g / need_per_result) for g in granted if g is not None), default=1.0)


def share_rate(demands: Iterable[float]) -> float:
    """Speed of each holder of one time-sliced GPU: 1 while their compute fits the GPU, else 100/sum
    (the GPU's time divided among them in proportion to what each would use alone)."""
    total = sum(demands)
    return 1.0 if total <= 100.0 else 100.0 / total


class Simulation:
    """One run of one trace on one cluster under one node policy. Not reusable: the cluster is consumed."""

    def __init__(self, cluster: SimCluster, policy: NodePolicy, strategy: str = "auto",
                 label: str = "trace.yaml", auto: AutoPlanner | None = None) -> None:
        self.cluster = cluster
        self.policy = policy
        self.strategy = strategy
        self.label = label
        self.auto = auto  # the controller's planner, under --strategy auto
        self._last_reason = ""
        self._fits_empty: dict[tuple[int, int], bool] = {}
        self._why_not: dict[int, str] = {}  # claim shape -> the allocator's reason on an empty node

    # ---- placement -------------------------------------------------------------------------------

    def _try(self, node: SimNode, index: int, pod: TracePod, claims: list[dict[str, Any]], shape: int,
             fallback_cores: float, explain: bool = False) -> _Running | None:
        """Place every claim of the pod on `node`, or none. Reasons are worked out only when asked
        (the never-fits check keeps them for the user); the event loop just moves on to the next node."""
        if shape in node.failed:
            return None
        done: list[tuple[str, list[dict[str, Any]]]] = []
        for j, claim in enumerate(claims):
            try:
                allocation = node.allocator.allocate(claim, node=node.name, explain=explain)
            except Unallocatable as e:
                for uid, _ in done:
                    node.allocator.remove_allocated(uid)
                    node.claims.pop(uid, None)
                node.failed.add(shape)
                self._last_reason = f"claims[{j}]: {e.reason}"
                return None
            except ValueError as e:  # a malformed claim: the user's to fix
                raise SimulateError(f"{self.label}: pods[{index}] ({pod.name}): claims[{j}]: {e}") from None
            allocated = {**claim, "status": {"allocation": allocation}}
            node.allocator.add_allocated(allocated)
            node.claims[claim["metadata"]["uid"]] = allocated
            done.append((claim["metadata"]["uid"], allocation["devices"]["results"]))
        return _Running(node, done, fallback_cores)

    def _release(self, running: _Running) -> None:
        for uid, _ in running.claims:
            running.node.allocator.remove_allocated(uid)
            running.node.claims.pop(uid, None)

    def _could_ever_fit(self, index: int, pod: TracePod, claims: list[dict[str, Any]], shape: int) -> bool:
        if self.auto is not None and self.auto.could_fit(claims, shape):
            return True
        for node_shape, node in self.cluster.pristine.items():
            key = (node_shape, shape)
            if key not in self._fits_empty:
                running = self._try(node, index, pod, claims, shape, 0.0, explain=True)
                if running:
                    self._release(running)
                node.failed.clear()
                self._fits_empty[key] = running is not None
                if running is None:
                    self._why_not.setdefault(shape, self._last_reason)
            if self._fits_empty[key]:
                return True
        return False

    def _replan(self, now: float, nodes: list[SimNode], pending: list[int], asking: list[int],
                start) -> list[int]:
        """Run the planner for the `asking` waiting pods over `nodes`; on each node it changed, the
        waiting pods retry, oldest first. Returns the pods still waiting."""
        assert self.auto is not None
        waiting = [(w, self._claim_sets[w], self._arrivals[w], str(self._pod_shapes[w])) for w in asking]
        changed = self.auto.plan(now, nodes, waiting)
        if not changed:
            return pending
        still: list[int] = []
        for w in pending:
            for node in changed:
                placed = self._try(node, w, self._pods[w], self._claim_sets[w], self._pod_shapes[w],
                                   self._fallback[w])
                if placed:
                    start(w, placed, now)
                    break
            else:
                still.append(w)
        return still

    # ---- the loop --------------------------------------------------------------------------------

    def run(self, pods: list[TracePod]) -> SimResult:
        shapes: dict[str, int] = {}
        claim_sets: list[list[dict[str, Any]]] = []
        pod_shapes: list[int] = []
        fallback: list[float] = []
        need_cores: list[float] = []  # percent of one GPU's SMs the pod needs, over all its devices
        for i, pod in enumerate(pods):
            key = json.dumps(pod.claims, sort_keys=True)
            pod_shapes.append(shapes.setdefault(key, len(shapes)))
            claim_sets.append([
                {"metadata": {"name": f"{pod.name}-{j}", "namespace": NAMESPACE, "uid": f"pod{i}-claim{j}"},
                 "spec": spec}
                for j, spec in enumerate(pod.claims)
            ])
            results_hint = sum(len((s.get("devices") or {}).get("requests") or []) for s in pod.claims)
            fallback.append(pod_demand(pod).cores / max(1, results_hint))
            need_cores.append(pod_demand(pod).cores)

        self._pods, self._claim_sets = pods, claim_sets  # read by _replan
        self._pod_shapes, self._fallback = pod_shapes, fallback
        self._arrivals = [p.arrival for p in pods]
        events: list[tuple[float, int, int, int]] = []
        for i, pod in enumerate(pods):
            events.append((pod.arrival, _ARRIVE, i, i))
        heapq.heapify(events)
        seq = len(pods)

        running: dict[int, _Running] = {}
        placements: dict[str, Placement] = {}
        pending: list[int] = []
        waits: list[float] = []
        never_fit = 0
        reasons: dict[str, str] = {}
        first_unfit: dict[int, str] = {}  # claim shape -> first pod of that shape that could never fit
        busy = peak = 0
        gpu_seconds = 0.0
        last_t = 0.0
        timeline = Timeline()

        def mark(now: float) -> None:
            timeline.add(now, busy, len(pending), self.auto.changes if self.auto is not None else 0)

        shared: dict[tuple[str, str], dict[int, float]] = {}  # time-sliced GPU -> holder -> cores
        live: dict[int, int] = {}  # pod -> seq of its current departure event (older ones are stale)
        stretches: list[float] = []
        extra = 0.0
        delays: list[float] = []

        def rerate(affected: Iterable[int], now: float) -> None:
            """New speeds for the holders of GPUs whose sharers changed; their departures move."""
            nonlocal seq
            for j in affected:
                run = running[j]
                run.work_left = max(0.0, run.work_left - (now - run.since) * run.rate)
                run.since = now
                run.rate = min((share_rate(shared[g].values()) for g in run.turns), default=run.cap)
                run.rate = min(run.rate, run.cap)
                live[j] = seq
                heapq.heappush(events, (now + run.work_left / run.rate, _DEPART, seq, j))
                seq += 1

        def start(i: int, run: _Running, now: float) -> None:
            nonlocal busy, peak
            results = [r for _, rs in run.claims for r in rs]
            busy += run.node.apply(results, +1, run.fallback_cores)
            peak = max(peak, busy)
            running[i] = run
            waits.append(now - pods[i].arrival)
            placements[pods[i].name] = Placement(
                run.node.name, now, [f"{r['request']}={r['device']}" for r in results])
            run.work_left, run.since, run.started = pods[i].duration, now, now
            # The pod's need is spread evenly over the devices it got (a 4-GPU job: 100% of each).
            run.cap = compute_cap((granted_cores(r, run.node.devices[r["device"]]) for r in results),
                                  need_cores[i] / max(1, len(results)))
            affected = {i}
            for r in results:
                cost = run.node.devices[r["device"]]
                if cost.turns:
                    key = (run.node.name, cost.gpu)
                    holders = shared.setdefault(key, {})
                    holders[i] = holders.get(i, 0.0) + run.fallback_cores
                    if key not in run.turns:
                        run.turns.append(key)
                    affected.update(holders)
            rerate(sorted(affected), now)

        while events:
            now, kind, _seq, i = heapq.heappop(events)
            if kind == _DEPART and live.get(i) != _seq:
                continue  # stale: the pod was re-rated, a later event stands for its departure
            gpu_seconds += busy * (now - last_t)
            last_t = now
            if kind == _ARRIVE:
                pod = pods[i]
                if not self._could_ever_fit(i, pod, claim_sets[i], pod_shapes[i]):
                    never_fit += 1
                    first = first_unfit.setdefault(pod_shapes[i], pod.name)
                    why = self._why_not.get(pod_shapes[i], "")
                    reasons[pod.name] = why if first == pod.name else f"same claims as pod {first}: {why}"
                    mark(now)
                    continue
                for node in self.policy.order(self.cluster.nodes):
                    run = self._try(node, i, pod, claim_sets[i], pod_shapes[i], fallback[i])
                    if run:
                        start(i, run, now)
                        break
                else:
                    pending.append(i)
                    if self.auto is not None:
                        pending = self._replan(now, self.cluster.nodes, pending, [i], start)
                mark(now)
                continue
            # departure
            del live[i]
            run = running.pop(i)
            stretches.append((now - run.started) / pods[i].duration if pods[i].duration else 1.0)
            late = now - run.started - pods[i].duration
            late = late if late > 1e-6 else 0.0  # float noise of re-rating, not a slowdown
            extra += late
            delays.append(run.started - pods[i].arrival + late)
            placements[pods[i].name].end = now
            affected: set[int] = set()
            for key in run.turns:
                holders = shared[key]
                holders.pop(i, None)
                affected.update(holders)
                if not holders:
                    del shared[key]
            if affected:
                rerate(sorted(affected), now)
            self._release(run)
            busy += run.node.apply([r for _, rs in run.claims for r in rs], -1, run.fallback_cores)
            run.node.failed.clear()
            still: list[int] = []
            for w in pending:
                placed = self._try(run.node, w, pods[w], claim_sets[w], pod_shapes[w], fallback[w])
                if placed:
                    start(w, placed, now)
                else:
                    still.append(w)
            pending = still
            if self.auto is not None:
                pending = self._replan(now, [run.node], pending, pending, start)
            mark(now)

        lower = lower_bound_gpus(pods, self.cluster.max_gpu_memory)
        return SimResult(
            strategy=self.strategy,
            node_policy=self.policy.name,
            gpus_total=self.cluster.gpus_total,
            peak_gpus_busy=peak,
            gpu_hours_busy=gpu_seconds / 3600.0,
            pods_total=len(pods),
            pods_scheduled=len(waits),
            pods_never_scheduled=never_fit + len(pending),
            mean_wait_s=sum(waits) / len(waits) if waits else 0.0,
            max_wait_s=max(waits, default=0.0),
            lower_bound_gpus=lower,
            packing_ratio=(peak / lower) if lower else None,
            pods_never_fit=never_fit,
            never_fit_reasons=reasons,
            gpus_by_strategy=self.cluster.strategies,
            strategy_changes=self.auto.changes if self.auto is not None else None,
            planner_runs=self.auto.plans if self.auto is not None else None,
            placements=placements,
            timeline=timeline,
            waits=waits,
            mean_stretch=sum(stretches) / len(stretches) if stretches else 1.0,
            p99_wait_s=percentile(waits, 99),
            mean_extra_run_s=extra / len(stretches) if stretches else 0.0,
            p99_delay_s=percentile(delays, 99),
        )
