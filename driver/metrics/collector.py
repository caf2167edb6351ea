"""The scrape-time half of the exporter: gauges read from the plugin's state when Prometheus asks.

`StateCollector` turns a `PluginState` (taken fresh at every scrape) into metric families: prepared claims,
registration, inventory, and each limited claim's usage read from its region file. Nothing here raises
into the HTTP handler: a region that cannot be read is skipped, counted and logged once per problem.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from driver.limits import RegionError
from driver.metrics.regions import ClaimUsage, is_limited, read_claim_usage, region_path
from driver.plugin.claims.dirs import ClaimDirs
from driver.plugin.enforcement.crosscheck import Findings
from driver.plugin.logfmt import event
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord

log = logging.getLogger(__name__)

# `claim_namespace`, not `namespace`: Prometheus's Kubernetes discovery labels the scraped pod's namespace
# as `namespace`, and a clash would rename ours to `exported_namespace`. Likewise `pod_namespace` / `pod`
# name the claim's consumer (its first pod in status.reservedFor; carve_claim_pod_info lists them all for
# a shared claim), while the scrape target's own pod would be relabelled by the ServiceMonitor.
CLAIM_LABELS = ("claim_namespace", "claim_name", "claim_uid", "pod_namespace", "pod")
DEVICE_LABELS = (*CLAIM_LABELS, "device", "gpu_uuid")


@dataclass(frozen=True)
class GpuState:
    uuid: str
    index: int
    model: str  # NVML product name, e.g. "NVIDIA A100-SXM4-80GB"
    strategy: str  # effective strategy (after any feature-gate fallback)
    memory_bytes: int


@dataclass(frozen=True)
class PluginState:
    """What one scrape reads from the plugin; built by driver.metrics.exporter.plugin_state."""

    registered: bool
    claims: list[ClaimRecord]
    claims_dir: Path | ClaimDirs  # where each claim's directory is (driver/plugin/claims/dirs.py)
    gpus: list[GpuState] = field(default_factory=list)
    # Whether a claim is still prepared now: a region that vanished because the claim was just unprepared
    # is not an error.
    still_prepared: Callable[[str], bool] = lambda _uid: True
    # The region watcher's last NVML cross-check (driver/plugin/enforcement/enforcer.py); None: not checked.
    findings: Findings | None = None
    # The pods consuming a claim (metrics/pods.py), sorted; none known: [].
    pods: Callable[[ClaimRecord], list[tuple[str, str]]] = lambda _record: []


def _claim_values(state: PluginState, record: ClaimRecord) -> list[str]:
    pods = state.pods(record)
    return [record.namespace, record.name, record.uid, *(pods[0] if pods else ("", ""))]


class StateCollector(Collector):
    def __init__(self, state: Callable[[], PluginState]):
        self.state = state
        self._lock = threading.Lock()  # scrapes may run concurrently (threaded HTTP server)
        self.region_errors = 0
        self._reported: dict[str, str] = {}  # claim uid -> last problem logged, to log each problem once

    def collect(self) -> Iterator[Metric]:
        state = self.state()
        yield from self._plugin(state)
        yield from self._inventory(state)
        yield from self._claims(state)
        yield from self._enforcement(state)

    # --- plugin and inventory --------------------------------------------------------------------------

    def _plugin(self, state: PluginState) -> Iterator[Metric]:
        prepared = GaugeMetricFamily(
            "carve_plugin_prepared_claims", "Claims prepared on this node (PrepareCompleted)."
        )
        prepared.add_metric([], sum(1 for c in state.claims if c.state == STATE_COMPLETED))
        yield prepared
        registered = GaugeMetricFamily(
            "carve_plugin_registered", "1 when the kubelet accepted the plugin's registration, else 0."
        )
        registered.add_metric([], 1 if state.registered else 0)
        yield registered

    def _inventory(self, state: PluginState) -> Iterator[Metric]:
        counts: dict[tuple[str, str], int] = {}
        info = GaugeMetricFamily(
            "carve_gpu_info",
            "Always 1: one series per GPU, for joins by gpu_uuid.",
            labels=["gpu_uuid", "index", "model", "strategy"],
        )
        memory = GaugeMetricFamily("carve_gpu_memory_bytes", "The GPU's memory.", labels=["gpu_uuid"])
        for g in state.gpus:
            counts[(g.strategy, g.model)] = counts.get((g.strategy, g.model), 0) + 1
            info.add_metric([g.uuid, str(g.index), g.model, g.strategy], 1)
            memory.add_metric([g.uuid], g.memory_bytes)
        gpus = GaugeMetricFamily(
            "carve_gpus", "GPUs on this node by effective strategy and model.", labels=["strategy", "model"]
        )
        for (strategy, model), n in sorted(counts.items()):
            gpus.add_metric([strategy, model], n)
        yield from (gpus, info, memory)

    # --- limited claims --------------------------------------------------------------------------------

    def _claims(self, state: PluginState) -> Iterator[Metric]:
        families = {
            "memory_used": GaugeMetricFamily(
                "carve_claim_memory_used_bytes",
                "Device memory the claim's processes hold.",
                labels=DEVICE_LABELS,
            ),
            "memory_limit": GaugeMetricFamily(
                "carve_claim_memory_limit_bytes", "The claim's memory quota (0 = none).", labels=DEVICE_LABELS
            ),
            "memory_peak": GaugeMetricFamily(
                "carve_claim_memory_peak_bytes", "Highest memory_used so far.", labels=DEVICE_LABELS
            ),
            "oom": CounterMetricFamily(
                "carve_claim_oom_refusals",
                "Allocations the limiter refused because they would exceed the quota.",
                labels=DEVICE_LABELS,
            ),
            "cores_limit": GaugeMetricFamily(
                "carve_claim_cores_limit_percent",
                "The claim's share of SM time (0 = not throttled).",
                labels=DEVICE_LABELS,
            ),
            "sm": GaugeMetricFamily(
                "carve_claim_sm_utilization_percent",
                "The claim's SM utilization as the limiter last measured it.",
                labels=DEVICE_LABELS,
            ),
        }
        processes = GaugeMetricFamily(
            "carve_claim_processes", "Processes attached to the claim's region.", labels=CLAIM_LABELS
        )
        pod_info = GaugeMetricFamily(
            "carve_claim_pod_info",
            "Always 1: one series per (prepared claim, consuming pod), for joins of shared claims.",
            labels=[*CLAIM_LABELS[:3], "pod_namespace", "pod"],
        )
        device_info = GaugeMetricFamily(
            "carve_claim_device_info",
            "Always 1: one series per device of a prepared claim, whatever its type (whole GPU, MIG, slice), "
            "with the physical GPU it is on: the dashboard's pod -> GPU table.",
            labels=[*DEVICE_LABELS, "type"],
        )
        for record in state.claims:
            if record.state != STATE_COMPLETED:
                continue
            pods = state.pods(record)
            for pod_ns, pod in pods:
                pod_info.add_metric([record.namespace, record.name, record.uid, pod_ns, pod], 1)
            for dev in record.devices:
                device_info.add_metric([*_claim_values(state, record), dev.device, dev.gpu_uuid, dev.type], 1)
            if not is_limited(record):
                continue
            usage = self._read(state, record)
            if usage is None:
                continue
            claim = _claim_values(state, record)
            processes.add_metric(claim, usage.processes)
            for d in usage.devices:
                labels = [*claim, d.device, d.gpu_uuid]
                families["memory_used"].add_metric(labels, d.memory_used_bytes)
                families["memory_limit"].add_metric(labels, d.memory_limit_bytes)
                families["memory_peak"].add_metric(labels, d.memory_peak_bytes)
                families["oom"].add_metric(labels, d.oom_refusals)
                families["cores_limit"].add_metric(labels, d.cores_limit_percent)
                families["sm"].add_metric(labels, d.sm_utilization_percent)
        with self._lock:  # forget problems of claims that are gone
            for uid in set(self._reported) - {c.uid for c in state.claims}:
                del self._reported[uid]
        yield from families.values()
        yield processes
        yield pod_info
        yield device_info
        errors = CounterMetricFamily(
            "carve_metrics_region_errors",
            "Scrapes that skipped a claim because its region file was missing or unreadable.",
        )
        errors.add_metric([], self.region_errors)
        yield errors

    # --- the NVML cross-check ----------------------------------------------------------------------------

    def _enforcement(self, state: PluginState) -> Iterator[Metric]:
        f = state.findings
        unenforced = GaugeMetricFamily(
            "carve_unenforced_processes",
            "Processes on a soft-sliced GPU whose pod (by their cgroup) holds no claim of that GPU, at the "
            "region watcher's last pass.",
            labels=["gpu_uuid"],
        )
        over = GaugeMetricFamily(
            "carve_claim_memory_over_quota_bytes",
            "Memory NVML counts for a claim's processes on a GPU beyond its quota, when over the margin.",
            labels=[*CLAIM_LABELS, "gpu_uuid"],
        )
        over_share = GaugeMetricFamily(
            "carve_claim_sm_over_share_percent",
            "Percentage points of a GPU's SM time NVML shows a claim's processes using above its effective "
            "compute share, sustained and not permitted by its core policy (mean over the check's window).",
            labels=[*CLAIM_LABELS, "gpu_uuid"],
        )
        kills = CounterMetricFamily(
            "carve_enforcement_kills", "Processes killed by --kill-unenforced since the plugin started."
        )
        unattributed = GaugeMetricFamily(
            "carve_claim_unattributed",
            "1 for a claim whose region has reported running processes for several checks in a row while "
            "NVML showed no process of the claim's pods on its GPUs (a forged or stale region).",
            labels=list(CLAIM_LABELS),
        )
        if f is not None:
            for gpu in f.soft_gpus:
                unenforced.add_metric([gpu], sum(1 for u in f.unenforced if u.gpu_uuid == gpu))
            refs = {c.uid: c for c in state.claims}
            for o in f.over_quota:
                c = refs.get(o.claim_uid)
                if c is not None:
                    over.add_metric([*_claim_values(state, c), o.gpu_uuid], o.used_bytes - o.limit_bytes)
            for s in f.over_share:
                c = refs.get(s.claim_uid)
                if c is not None:
                    over_share.add_metric(
                        [*_claim_values(state, c), s.gpu_uuid], s.used_percent - s.share_percent
                    )
            kills.add_metric([], f.kills)
            for uid in f.unattributed:
                c = refs.get(uid)
                if c is not None:
                    unattributed.add_metric([c.namespace, c.name, c.uid], 1)
        yield from (unenforced, over, over_share, kills, unattributed)

    def _read(self, state: PluginState, record: ClaimRecord) -> ClaimUsage | None:
        path = region_path(state.claims_dir, record.uid)
        try:
            usage = read_claim_usage(record, path)
        except (RegionError, OSError, ValueError) as e:
            problem = str(e)
        except Exception as e:  # a scrape must never fail because of one claim
            problem = f"internal error: {type(e).__name__}: {e}"
        else:
            with self._lock:
                self._reported.pop(record.uid, None)
            return usage
        if not state.still_prepared(record.uid):
            return None  # unprepared while we read it
        with self._lock:
            self.region_errors += 1
            first = self._reported.get(record.uid) != problem
            self._reported[record.uid] = problem
        if first:
            event(
                log,
                logging.WARNING,
                "metrics.region-unreadable",
                claim=f"{record.namespace}/{record.name}",
                uid=record.uid,
                error=problem,
                action="claim skipped in metrics",
            )
        return None
