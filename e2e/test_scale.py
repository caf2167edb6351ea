"""Scale benchmark (printed, not asserted on time): the scheduler's view of carve's consumable capacity.

Two phases in one run, on the same number of kubelet-less nodes of 8 fake A100-80GB each, with the same
number of pods, through the real kube-scheduler:
1. whole: every GPU published as one exclusive device (DeviceClass gpu.carve.dev), one GPU per pod;
2. soft: every GPU published as one shared device with consumable capacity (vgpu.carve.dev: 4Gi and 10 %
   of the cores per pod; gates off: slot.carve.dev).
Each phase has its own node set (labelled, selected by nodeSelector) and is torn down (pods, claims, slices,
nodes) before the next starts, so neither phase's slices or allocations are in the other's scheduler state.
The figure is pods bound per second from the first create to the last binding (pods are created by eight
client threads so creation runs ahead of the scheduler), and the ratio soft / whole: what consumable
capacity costs the scheduler. Then, with the soft pods still allocated, prepare latency on the real kubelet
node e2e-n1: bound -> Running p50/p99.

CARVE_E2E_SCALE_NODES (default 10) nodes per phase, or a comma-separated list of sizes run one after the other
on the same cluster (`10,100`: the 10 x 8 and 100 x 8 runs of docs/performance.md in one session);
CARVE_E2E_SCALE_PODS (default nodes x 8: every whole GPU taken once) pods per phase.
CARVE_E2E_SCALE_REPEATS (default 1): the pair of phases this many times per size, the order alternating
(whole then soft, soft then whole, ...); each phase's figure is then the median of its runs, the ratio the
median of the pairs' ratios, and (from two runs) each order's median ratio and their geometric mean: at
100 x 8 the phase that ran second was slower in both orders (issue 30), a bias the geometric mean cancels."""

from __future__ import annotations

import json
import os
import re
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from kubernetes import client

from driver import names
from driver.devices import build_slices
from driver.devices.catalog import fake_gpu
from e2e import kube
from e2e.cluster import kubeconfig
from e2e.test_differential import _node

SIZES = [int(n) for n in os.environ.get("CARVE_E2E_SCALE_NODES", "10").split(",") if n.strip()]
GPUS_PER_NODE = 8
PODS_SET = os.environ.get("CARVE_E2E_SCALE_PODS")
REPEATS = max(1, int(os.environ.get("CARVE_E2E_SCALE_REPEATS", "1")))
CREATORS = 8  # client threads creating pods
PREPARE_PODS = 8  # what e2e-n1's two soft GPUs hold at 10 cores each, with room
SCALE_LABEL = "carve.dev/e2e-scale"  # on the kubelet-less nodes: the phase they belong to
G, V = "resource.k8s.io", "v1"


@dataclass(frozen=True)
class Phase:
    name: str  # "whole" or "soft"
    strategy: str  # the strategy every GPU of the phase's nodes is published with
    request: dict  # the claim template's one request
    shared: bool  # whether an allocation of it carries a shareID (a share of a multi-allocatable device)
    node_count: int  # kubelet-less nodes of GPUS_PER_NODE GPUs
    pods: int  # pods created, each with one claim of `request`

    @property
    def nodes(self) -> list[str]:
        return [f"scale-{self.name}-{i}" for i in range(self.node_count)]


@dataclass(frozen=True)
class Figures:
    created_s: float  # first create -> last create returned
    bound_s: float  # first create -> last pod seen bound
    requests_per_pod: float  # API server requests of every client during the phase, per pod
    watch_restarts: list[str]  # why the binding watch ended each time it was listed again
    pods: int

    @property
    def pods_per_s(self) -> float:
        return self.pods / self.bound_s


def _phases(gates_on: bool, nodes: int, pods: int) -> tuple[Phase, Phase]:
    whole = Phase(
        "whole",
        "exclusive",
        {"name": "gpu", "exactly": {"deviceClassName": names.CLASS_GPU}},
        False,
        nodes,
        pods,
    )
    if gates_on:
        capacity = {"requests": {"memory": "4Gi", "cores": "10"}}
        exactly = {"deviceClassName": names.CLASS_VGPU, "capacity": capacity}
        return whole, Phase("soft", "soft", {"name": "gpu", "exactly": exactly}, True, nodes, pods)
    # Gates off: no consumable capacity; the plugin's fallback is 10 slot devices per GPU.
    return whole, Phase(
        "slots",
        "slots",
        {"name": "gpu", "exactly": {"deviceClassName": names.CLASS_SLOT}},
        False,
        nodes,
        pods,
    )


def _requests_total(cluster) -> float:
    cp = cluster.cp
    _, text = kubeconfig.get(cp.server, cp.ca.path, cp.admin.cert, cp.admin.key, "/metrics", timeout_s=20)
    return sum(
        float(m.group(1)) for m in re.finditer(r"^apiserver_request_total\{[^}]*\} (\S+)$", text, re.M)
    )


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def _publish(api, phase: Phase, minor: str) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for n in phase.nodes:
        _node(api, n)
        core.patch_node(n, {"metadata": {"labels": {SCALE_LABEL: phase.name}}})
        gpus = [fake_gpu("A100-80GB", i, n) for i in range(GPUS_PER_NODE)]
        strategies = dict.fromkeys(range(GPUS_PER_NODE), phase.strategy)
        for s in build_slices(n, gpus, strategies, k8s_version=minor):
            custom.create_cluster_custom_object(G, V, "resourceslices", s)


class _BindingWatch:
    """Watches the namespace's pods from a thread and notes when the last of `want` was seen bound.
    The events are read as raw JSON: deserializing thousands of V1Pods would compete with the scheduler
    for this machine's two cores. The API server ends a watch whose reader falls behind (and any watch may
    expire or answer 410 Gone): then the pods are listed again and a new watch starts from that list."""

    def __init__(self, api, namespace: str, prefix: str, want: int, timeout_s: float) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.prefix, self.want = namespace, prefix, want
        self.bound: set[str] = set()
        self.done_at: float | None = None
        self.error: BaseException | None = None
        self.restarts: list[str] = []  # why each watch ended before all pods were bound
        self._deadline = time.monotonic() + timeout_s
        self._stop = threading.Event()
        self._resp = None
        self._rv = self._list()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _list(self) -> str:
        resp = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
        body = json.loads(resp.data)
        for obj in body["items"]:
            self._see({"type": "ADDED", "object": obj})
        return body["metadata"]["resourceVersion"]

    def _run(self) -> None:
        try:
            while self.done_at is None and not self._stop.is_set() and not self._watch():
                if time.monotonic() > self._deadline:
                    return
                self._rv = self._list()
        except BaseException as e:  # reported by wait()
            self.error = e

    def _watch(self) -> bool:
        """One watch from the last resource version seen: True once `want` pods are bound, False when the
        server ended it first."""
        self._resp = self.core.list_namespaced_pod(
            self.namespace,
            watch=True,
            resource_version=self._rv,
            timeout_seconds=max(1, int(self._deadline - time.monotonic())),
            _preload_content=False,
        )
        buf = b""
        for chunk in self._resp.stream(65536, decode_content=True):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":  # 410 Gone and the like: list again
                    self.restarts.append(str((event.get("object") or {}).get("message", "error event"))[:120])
                    return False
                self._rv = ((event.get("object") or {}).get("metadata") or {}).get(
                    "resourceVersion", self._rv
                )
                if self._see(event):
                    return True
        self.restarts.append("the server ended the stream")
        return False

    def _see(self, event: dict) -> bool:
        obj = event.get("object") or {}
        name = (obj.get("metadata") or {}).get("name", "")
        seen = event.get("type") in ("ADDED", "MODIFIED") and name.startswith(self.prefix)
        if seen and (obj.get("spec") or {}).get("nodeName"):
            self.bound.add(name)
        if len(self.bound) >= self.want and self.done_at is None:
            self.done_at = time.monotonic()
        return self.done_at is not None

    def wait(self) -> float:
        self._thread.join(max(0.0, self._deadline - time.monotonic()) + 5)
        self._stop.set()
        if self._resp is not None:
            self._resp.close()
        if self.done_at is None:
            raise AssertionError(
                f"{len(self.bound)} of {self.want} {self.prefix}* pods bound before the deadline"
                + (f" (watch failed: {self.error!r})" if self.error else "")
            )
        return self.done_at


def _run(cluster, api, namespace: str, phase: Phase, run: int) -> Figures:
    """Create phase.pods pods asking for its request on its nodes; return the figures once all are bound.
    `run` numbers the phase's repetitions: its template and pods are named after it."""
    core = client.CoreV1Api(api)
    template = f"scale-{phase.name}-{run}"
    kube.create(api, namespace, kube.template(template, [phase.request]))

    def pod(i: int) -> dict:
        p = kube.pod(f"{phase.name}-{run}-{i}", claim_template=template)
        p["spec"]["nodeSelector"] = {SCALE_LABEL: phase.name}
        p["spec"]["tolerations"] = [{"operator": "Exists"}]  # not-ready/unreachable: no kubelet
        return p

    watch = _BindingWatch(api, namespace, f"{phase.name}-{run}-", phase.pods, timeout_s=900)
    before = _requests_total(cluster)
    t0 = time.monotonic()
    with ThreadPoolExecutor(CREATORS) as pool:
        list(pool.map(lambda i: core.create_namespaced_pod(namespace, pod(i)), range(phase.pods)))
    created = time.monotonic() - t0
    done = watch.wait()
    requests = (_requests_total(cluster) - before) / phase.pods
    return Figures(created, done - t0, requests, watch.restarts, phase.pods)


def _check_placement(api, namespace: str, phase: Phase) -> None:
    """Every pod of the phase on one of its nodes, every claim allocated from those nodes' pools, shared or
    whole as the phase publishes: the two phases' devices were never mixed."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    nodes = set(phase.nodes)
    pods = [
        p for p in core.list_namespaced_pod(namespace).items if p.metadata.name.startswith(f"{phase.name}-")
    ]
    assert len(pods) == phase.pods
    elsewhere = [f"{p.metadata.name} on {p.spec.node_name}" for p in pods if p.spec.node_name not in nodes]
    assert not elsewhere, f"{phase.name} pods off the phase's nodes: {elsewhere[:5]}"
    claims = custom.list_namespaced_custom_object(G, V, namespace, "resourceclaims")["items"]
    mine = [c for c in claims if c["metadata"]["name"].startswith(f"{phase.name}-")]
    assert len(mine) == phase.pods
    per_device: dict[tuple[str, str], int] = {}
    for c in mine:
        (r,) = kube.results(c)
        assert r["driver"] == names.DRIVER_NAME and r["pool"] in nodes, (c["metadata"]["name"], r)
        assert ("shareID" in r) == phase.shared, (c["metadata"]["name"], r)
        per_device[(r["pool"], r["device"])] = per_device.get((r["pool"], r["device"]), 0) + 1
    if phase.name == "whole":
        assert max(per_device.values()) == 1, "a whole GPU allocated twice"


def _tear_down(api, namespace: str, phase: Phase) -> None:
    """Pods, their claims (released by the controller manager), then the phase's slices and nodes."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    prefix = f"{phase.name}-"
    with ThreadPoolExecutor(CREATORS) as pool:
        list(
            pool.map(
                lambda n: core.delete_namespaced_pod(n, namespace, grace_period_seconds=0),
                [
                    p.metadata.name
                    for p in core.list_namespaced_pod(namespace).items
                    if p.metadata.name.startswith(prefix)
                ],
            )
        )

    def claims_gone() -> bool:
        items = custom.list_namespaced_custom_object(G, V, namespace, "resourceclaims")["items"]
        return not any(c["metadata"]["name"].startswith(prefix) for c in items)

    kube.wait(f"{phase.name} claims gone", claims_gone, timeout_s=600, every_s=2)
    nodes = set(phase.nodes)
    for s in custom.list_cluster_custom_object(G, V, "resourceslices")["items"]:
        if s["spec"].get("nodeName") in nodes:
            custom.delete_cluster_custom_object(G, V, "resourceslices", s["metadata"]["name"])
    for n in phase.nodes:
        try:
            core.delete_node(n)
        except client.exceptions.ApiException as e:
            if e.status != 404:  # a publish cut short (a failure, a timeout) made only some of them
                raise


def _prepare_latency(api, namespace: str, phase: Phase, run: int) -> list[float]:
    """bound -> Running of PREPARE_PODS pods of the shared phase's claim on the real node e2e-n1 (the
    kubelet's NodePrepareResources call to the plugin plus the runtime), with that phase's pods allocated."""
    ready = []
    template = f"scale-{phase.name}-{run}"
    for i in range(PREPARE_PODS):
        kube.create(api, namespace, kube.pod(f"real{i}", claim_template=template, node="e2e-n1"))
    for i in range(PREPARE_PODS):
        p = kube.wait_running(api, namespace, f"real{i}", timeout_s=180)
        sched = next(c for c in p.status.conditions if c.type == "PodScheduled").last_transition_time
        run = p.status.container_statuses[0].state.running.started_at
        ready.append((run - sched).total_seconds())
    return ready


@pytest.mark.parametrize("node_count", SIZES, ids=[f"{n}x{GPUS_PER_NODE}" for n in SIZES])
@pytest.mark.timeout(600 * REPEATS)  # a 100 x 8 pair takes 2-5 minutes on the loaded 2-core machine
def test_scale(cluster, api, namespace, gates_on, node_count):
    if cluster.version.capacity_check_bug:
        # Every soft claim is checked against each slice's first device, which fills after ten claims: the
        # other pods never schedule (the bug itself is shown by strict xfails in test_scheduling and
        # test_differential). A benchmark of that path measures nothing.
        pytest.skip(cluster.version.capacity_check_bug)
    pods = int(PODS_SET) if PODS_SET else node_count * GPUS_PER_NODE
    if pods > node_count * GPUS_PER_NODE:
        pytest.fail(
            f"CARVE_E2E_SCALE_PODS={pods}: more than the {node_count * GPUS_PER_NODE} whole GPUs of "
            f"{node_count} nodes x {GPUS_PER_NODE}: the whole-device phase cannot place them"
        )
    whole, shared = _phases(gates_on, node_count, pods)
    runs: dict[str, list[Figures]] = {whole.name: [], shared.name: []}
    ratios: list[float] = []
    ready: list[float] = []
    current = None
    try:
        for run in range(REPEATS):
            # Alternate which phase goes first: a phase that always runs first (or second) would carry
            # whatever the cluster's warm-up or the machine's load does at that moment into the ratio.
            pair: dict[str, Figures] = {}
            for phase in (whole, shared) if run % 2 == 0 else (shared, whole):
                current = phase
                _publish(api, phase, cluster.version.minor)
                pair[phase.name] = _run(cluster, api, namespace, phase, run)
                _check_placement(api, namespace, phase)
                if phase is shared and not ready:
                    ready = _prepare_latency(api, namespace, phase, run)
                _tear_down(api, namespace, phase)
                current = None
            for name, f in pair.items():
                runs[name].append(f)
            ratios.append(pair[shared.name].pods_per_s / pair[whole.name].pods_per_s)
    finally:
        if current is not None:
            _tear_down(api, namespace, current)
    label = f"{cluster.version.label}, {node_count} nodes x {GPUS_PER_NODE} A100-80GB, {pods} pods per phase"
    lines = [f"\nscale ({label}, {REPEATS} run(s) of each phase, order alternating):"]
    for phase in (whole, shared):
        klass = phase.request["exactly"]["deviceClassName"]
        for i, f in enumerate(runs[phase.name]):
            lines.append(
                f"  {phase.name:5} ({klass}) run {i}: created in {f.created_s:.1f}s, "
                f"all bound after {f.bound_s:.1f}s = {f.pods_per_s:.1f} pods/s; "
                f"{f.requests_per_pod:.1f} API requests per pod"
                + (
                    f" (binding watch listed again after: {'; '.join(f.watch_restarts)})"
                    if f.watch_restarts
                    else ""
                )
            )
    w = statistics.median(f.pods_per_s for f in runs[whole.name])
    s = statistics.median(f.pods_per_s for f in runs[shared.name])
    lines.append(
        f"  {shared.name}/whole pods/s: median of the pairs {statistics.median(ratios):.2f} "
        f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)}); of the medians {s / w:.2f} "
        f"({shared.name} devices cost the scheduler {w / s:.2f}x the time per pod)"
    )
    if len(ratios) > 1:
        # At 100 x 8 the phase that ran second in a pair was slower in both orders (issue 30's runs): each
        # order's median ratio, and their geometric mean, which that bias cancels out of.
        first, second = statistics.median(ratios[0::2]), statistics.median(ratios[1::2])
        lines.append(
            f"  order-balanced: whole first {first:.2f}, {shared.name} first {second:.2f}, "
            f"geometric mean {(first * second) ** 0.5:.2f}"
        )
    if ready:
        lines.append(
            f"  on the real kubelet node e2e-n1, {PREPARE_PODS} {shared.name} pods bound->Running "
            f"p50 {_pct(ready, 50):.2f}s p99 {_pct(ready, 99):.2f}s (1 s timestamp resolution)"
        )
    print("\n".join(lines))
