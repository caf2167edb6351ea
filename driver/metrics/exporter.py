"""The plugin's Prometheus exporter: one registry per plugin, event counters, and the /metrics server.

`PluginMetrics` owns a private `CollectorRegistry` (never the global one, so two plugins in one process,
or in one test run, never see each other's series). Events are counted as they happen (`observe_request`
from the gRPC service, `observe_publish*` from the publisher loop); everything else is read at scrape time
by `StateCollector`. `MetricsServer` serves the registry over HTTP on --metrics-addr.
"""

from __future__ import annotations

import platform
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from driver import __version__
from driver.metrics.collector import GpuState, PluginState, StateCollector
from driver.metrics.pods import ClaimPods
from driver.plugin.health.policy import REASONS as HEALTH_REASONS

# Prepare can create MIG instances (seconds); a cached answer takes microseconds.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
INTERNAL_ERROR_PREFIX = "internal error:"  # how the preparer reports an unexpected exception
# The label values the event series can take. Each combination is exported at 0 from the start (Prometheus
# practice): a series born at its first event would hide that event from rate()/increase(), which need a
# sample before it, and a dashboard panel on a quiet plugin would show nothing instead of 0.
API_VERSIONS = ("v1", "v1beta1")  # the DRA gRPC services (driver/plugin/service.py's servicers)
OPERATIONS = ("prepare", "unprepare")
RESULTS = ("ok", "error", "internal_error")  # claim_result
HEALTH_EVENT_REASONS = (*HEALTH_REASONS, "other", "recovered")  # observe_health (policy.reason_label)


# A GPU's pending mode reason (driver/plugin/mig/modes.py words it for logs and Events) -> one of a fixed
# set, so the label stays bounded: the free text carries claim counts and MIG instance ids.
PENDING_REASONS = (
    ("needs reset", "needs_reset"),
    ("waiting for", "claims_prepared"),
    ("did not create", "foreign_mig_instances"),
    ("no MIG support", "no_mig_support"),
    ("switching MIG mode", "switching_mig_mode"),
)


def pending_reason(text: str) -> str:
    return next((label for needle, label in PENDING_REASONS if needle in text), "other")


def build_info(registry: CollectorRegistry, component: str) -> Gauge:
    """`carve_build_info{version, python, component} 1`: which carve answers, for joins and upgrades."""
    info = Gauge(
        "carve_build_info",
        "Always 1: the carve version and Python of this component.",
        ["version", "python", "component"],
        registry=registry,
    )
    info.labels(__version__, platform.python_version(), component).set(1)
    return info


def claim_result(error: str) -> str:
    """ok | error (the claim cannot be prepared as asked) | internal_error (a bug or the node)."""
    if not error:
        return "ok"
    return "internal_error" if error.startswith(INTERNAL_ERROR_PREFIX) else "error"


class NodeLabelled(Collector):
    """Another registry's metrics, with `node="<node>"` added to every series of a GPU (carve_gpu*, and
    any with a `gpu_uuid` label): a GPU UUID alone does not say where the GPU is, and dashboards and alerts
    filter and group by node. Set by the exporter, so it holds however Prometheus scrapes (ServiceMonitor,
    PodMonitor, a static config)."""

    def __init__(self, inner: CollectorRegistry, node: str):
        self.inner = inner
        self.node = node

    def collect(self) -> Iterator[Metric]:
        for family in self.inner.collect():
            gpu_family = family.name.startswith("carve_gpu")  # carve_gpus, carve_gpu_info, carve_gpu_healthy
            family.samples = [
                s._replace(labels={**s.labels, "node": self.node})
                if gpu_family or "gpu_uuid" in s.labels
                else s
                for s in family.samples
            ]
            yield family


class PluginMetrics:
    def __init__(self, state: Callable[[], PluginState], node: str = ""):
        r = CollectorRegistry(auto_describe=False)
        # Served: the metrics below, GPU series labelled with the node (none given: as they are).
        self.registry = r
        if node:
            self.registry = CollectorRegistry(auto_describe=False)
            self.registry.register(NodeLabelled(r, node))
        self.requests = Counter(
            "carve_plugin_requests",
            "NodePrepareResources / NodeUnprepareResources calls with at least one claim.",
            ["api_version", "operation"],
            registry=r,
        )
        self.claims = Counter(
            "carve_plugin_claim_operations",
            "Claims prepared or unprepared, by outcome.",
            ["api_version", "operation", "result"],
            registry=r,
        )
        self.duration = Histogram(
            "carve_plugin_request_duration_seconds",
            "Time to answer a NodePrepareResources / NodeUnprepareResources call.",
            ["api_version", "operation"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.slices = Gauge(
            "carve_plugin_published_slices",
            "ResourceSlices of the pool as last published.",
            ["pool"],
            registry=r,
        )
        self.devices = Gauge(
            "carve_plugin_published_devices", "Devices in the pool as last published.", ["pool"], registry=r
        )
        self.generation = Gauge(
            "carve_plugin_pool_generation", "The pool generation last published.", ["pool"], registry=r
        )
        self.publish_errors = Counter(
            "carve_plugin_publish_errors", "Publishes that failed after all retries.", registry=r
        )
        self.last_publish_error = Gauge(
            "carve_plugin_last_publish_error_timestamp_seconds",
            "Unix time of the last failed publish (0 = none since start).",
            registry=r,
        )
        self.mode_pending = Gauge(
            "carve_plugin_gpu_mode_pending",
            "1 for a GPU not published under its strategy yet, with the reason (driver/plugin/mig/modes.py).",
            ["gpu_uuid", "index", "strategy", "reason"],
            registry=r,
        )
        self.fallback = Gauge(
            "carve_plugin_gpu_strategy_fallback",
            "1 for a GPU that runs --fallback-strategy because it cannot run the strategy its rule gives.",
            ["gpu_uuid", "index", "wanted", "strategy"],
            registry=r,
        )
        self.gate_off = Gauge(
            "carve_plugin_feature_gate_off",
            "1 for a DRA feature gate the API server has off (its fields are dropped on write), so the node "
            "offers whole GPUs and slot devices in place of soft slices, MIG and time-slicing.",
            ["gate"],
            registry=r,
        )
        self.toolkit_unsafe = Gauge(
            "carve_plugin_toolkit_unsafe",
            "1 for a setting of the node's NVIDIA container toolkit that hands containers GPUs past carve "
            "(driver/plugin/toolkit.py).",
            ["setting", "path"],
            registry=r,
        )
        self.fallbacks = Counter(
            "carve_plugin_strategy_fallbacks",
            "GPUs put on --fallback-strategy since start (a GPU counts once per strategy it could not run).",
            registry=r,
        )
        self.build_info = build_info(r, "plugin")
        self.gpu_healthy = Gauge(
            "carve_gpu_healthy",
            "1 while the GPU is healthy, 0 while the health monitor holds it unhealthy.",
            ["gpu_uuid", "index"],
            registry=r,
        )
        self.health_events = Counter(
            "carve_gpu_health_events",
            "GPU health flips: reason is the cause of going unhealthy (xid, gpu-lost, ecc-pages-pending, "
            "nvml-event-error) or 'recovered'.",
            ["reason"],
            registry=r,
        )
        self.state_collector = StateCollector(state)
        r.register(self.state_collector)
        self._start_event_series_at_zero()

    def _start_event_series_at_zero(self) -> None:
        for api_version in API_VERSIONS:
            for operation in OPERATIONS:
                self.requests.labels(api_version, operation)
                self.duration.labels(api_version, operation)
                for result in RESULTS:
                    self.claims.labels(api_version, operation, result)
        for reason in HEALTH_EVENT_REASONS:
            self.health_events.labels(reason)

    def observe_request(
        self, api_version: str, operation: str, seconds: float, errors: Iterable[str]
    ) -> None:
        """One gRPC call: its duration and each claim's outcome ('' = ok)."""
        self.requests.labels(api_version, operation).inc()
        self.duration.labels(api_version, operation).observe(seconds)
        for error in errors:
            self.claims.labels(api_version, operation, claim_result(error)).inc()

    def observe_publish(self, pool: str, stored: list[dict]) -> None:
        """A successful publish: what the API server holds now."""
        self.slices.labels(pool).set(len(stored))
        self.devices.labels(pool).set(sum(len(s.get("spec", {}).get("devices") or []) for s in stored))
        self.generation.labels(pool).set(
            max((s.get("spec", {}).get("pool", {}).get("generation", 0) for s in stored), default=0)
        )

    def observe_modes(self, modes: Iterable) -> None:
        """Each GPU's mode status (modes.GpuMode): one series per GPU that waits, none for the others."""
        self.mode_pending.clear()
        for m in modes:
            if m.pending:
                self.mode_pending.labels(m.uuid, str(m.index), m.effective, pending_reason(m.pending)).set(1)

    def observe_fallback(self, gpu_uuid: str, index: int, wanted: str, strategy: str) -> None:
        self.fallback.labels(gpu_uuid, str(index), wanted, strategy).set(1)
        self.fallbacks.inc()

    def observe_toolkit_finding(self, setting: str, path: str) -> None:
        self.toolkit_unsafe.labels(setting, path).set(1)

    def observe_gates_off(self, gates: Iterable[str]) -> None:
        for gate in gates:
            self.gate_off.labels(gate).set(1)

    def observe_health(self, changes: Iterable, gpus: Iterable[tuple[str, int]], unhealthy: dict) -> None:
        """Health flips (policy.Change) and every GPU's health now (`unhealthy`: index -> cause)."""
        from driver.plugin.health.policy import reason_label

        for c in changes:
            self.health_events.labels("recovered" if c.healthy else reason_label(c.cause)).inc()
        for uuid, index in gpus:
            self.gpu_healthy.labels(uuid, str(index)).set(0 if index in unhealthy else 1)

    def observe_publish_failure(self) -> None:
        self.publish_errors.inc()
        self.last_publish_error.set(time.time())


_CLAIM_PODS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # plugin -> its ClaimPods


def _claim_pods(plugin) -> ClaimPods | None:
    get_claim = getattr(plugin.cluster, "get_resource_claim", None)
    if get_claim is None:
        return None
    if plugin not in _CLAIM_PODS:
        _CLAIM_PODS[plugin] = ClaimPods(get_claim)
    return _CLAIM_PODS[plugin]


def plugin_state(plugin) -> PluginState:
    """The scrape-time view of a started driver.plugin.server.Plugin."""
    preparer = plugin.preparer
    pods = _claim_pods(plugin)
    if pods is not None:
        pods.forget_except(set(preparer.state))
    effective = plugin.publisher.applied  # GPUs not published (mode pending) have no strategy
    return PluginState(
        registered=plugin.registration.status == "registered",
        claims=list(preparer.state.values()),  # a copy: prepare may change the dict meanwhile
        claims_dir=preparer.claims_dir,
        gpus=[
            GpuState(g.uuid, g.index, g.product, effective.get(g.index, ""), g.memory_bytes)
            for g in plugin.gpus
        ],
        still_prepared=lambda uid: uid in preparer.state,
        pods=pods.pods if pods is not None else (lambda _record: []),
        findings=plugin.region_watcher.enforcer.findings
        if plugin.region_watcher is not None and plugin.region_watcher.enforcer is not None
        else None,
    )


class MetricsServer:
    """HTTP on `addr` ("[host]:port"; port 0 picks a free one) serving the registry at any path."""

    def __init__(self, addr: str, registry: CollectorRegistry):
        host, _, port = addr.rpartition(":")
        self.host = host.strip("[]") or "0.0.0.0"
        self.requested_port = int(port)
        self.registry = registry
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server else self.requested_port

    def start(self) -> None:
        self._server, self._thread = start_http_server(self.requested_port, self.host, self.registry)

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
