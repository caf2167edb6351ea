"""Prometheus metrics of the legacy shim: the device plugin's per-container usage and the scheduler
extender's filter/bind figures.

Device plugin (`carve device-plugin --metrics-addr`): each container's allocation has the same region and
limits files as a DRA claim (PreStartContainer writes them, prestart.py), so its usage is read the same way
(driver/metrics/regions.py) and exported under the same names and labels as a DRA claim's
(`carve_claim_memory_used_bytes`, ...): `claim_namespace`/`pod_namespace` = the pod's namespace,
`claim_name` = `<pod>/<container>`, `claim_uid` = the allocation's id, `pod` = the pod. PreStartContainer
records whose allocation it is in `owner.json` beside the region (versioned, written atomically).

Extender (GET /metrics on its own --addr): HAMi's scheduler exported its filter/bind latency and errors;
users moving from it keep them here under carve's names: request duration per verb (histogram), errors by
a fixed kind, and the assignments it made (successful binds, each recorded in a ConfigMap). Labels are
bounded: the verb is one of three, the kind one of three; no pod or node names (those are in the records
and the log).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from driver import names
from driver.fsutil import write_atomic
from driver.limits import RegionError
from driver.metrics.collector import DEVICE_LABELS
from driver.metrics.exporter import build_info
from driver.metrics.regions import read_claim_usage
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord

log = logging.getLogger(__name__)
OWNER_FILE = "owner.json"
OWNER_VERSION = 1


@dataclass(frozen=True)
class AllocationOwner:
    namespace: str
    pod: str
    container: str
    gpus: tuple[tuple[str, int], ...]  # (uuid, minor) of each GPU, in the limits file's order


def write_owner(allocation_dir: Path, owner: AllocationOwner) -> None:
    doc = {
        "version": OWNER_VERSION,
        "namespace": owner.namespace,
        "pod": owner.pod,
        "container": owner.container,
        "gpus": [{"uuid": u, "minor": m} for u, m in owner.gpus],
    }
    write_atomic(Path(allocation_dir) / OWNER_FILE, json.dumps(doc).encode(), mode=0o600)


def read_owner(allocation_dir: Path) -> AllocationOwner | None:
    """The owner file, or None when missing, of another version or malformed (the scrape skips it)."""
    try:
        doc = json.loads((Path(allocation_dir) / OWNER_FILE).read_text())
        if doc.get("version") != OWNER_VERSION:
            return None
        gpus = tuple((str(g["uuid"]), int(g["minor"])) for g in doc["gpus"])
        return AllocationOwner(str(doc["namespace"]), str(doc["pod"]), str(doc["container"]), gpus)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
        return None  # RecursionError: nesting past the stack; OverflowError: a minor of 1e400


class AllocationsCollector(Collector):
    """The device plugin's containers' usage at scrape time, as DRA claims' (driver/metrics/collector.py)."""

    def __init__(self, allocations_dir: Path, node_name: str) -> None:
        self.root = Path(allocations_dir)
        self.node_name = node_name
        self.region_errors = 0

    def _allocations(self) -> Iterator[tuple[str, AllocationOwner]]:
        try:
            entries = sorted(self.root.iterdir())
        except OSError:
            return
        for entry in entries:
            owner = read_owner(entry)
            if owner is not None:
                yield entry.name, owner

    def collect(self) -> Iterator[Metric]:
        families = {
            "memory_used_bytes": GaugeMetricFamily(
                "carve_claim_memory_used_bytes",
                "Device memory the container's processes hold.",
                labels=DEVICE_LABELS,
            ),
            "memory_limit_bytes": GaugeMetricFamily(
                "carve_claim_memory_limit_bytes",
                "The container's memory quota (0 = none).",
                labels=DEVICE_LABELS,
            ),
            "cores_limit_percent": GaugeMetricFamily(
                "carve_claim_cores_limit_percent",
                "The container's share of SM time (0 = not throttled).",
                labels=DEVICE_LABELS,
            ),
            "sm_utilization_percent": GaugeMetricFamily(
                "carve_claim_sm_utilization_percent",
                "The container's SM utilization as the limiter measured it.",
                labels=DEVICE_LABELS,
            ),
        }
        oom = CounterMetricFamily(
            "carve_claim_oom_refusals",
            "Allocations the limiter refused over the quota.",
            labels=DEVICE_LABELS,
        )
        for uid, owner in self._allocations():
            record = ClaimRecord(
                uid,
                owner.namespace,
                f"{owner.pod}/{owner.container}",
                STATE_COMPLETED,
                [
                    DeviceRecord([], self.node_name, f"gpu-{minor}", None, [], names.TYPE_VGPU, uuid)
                    for uuid, minor in owner.gpus
                ],
            )
            try:
                usage = read_claim_usage(record, ClaimFiles(self.root / uid).region)
            except (RegionError, OSError, ValueError):
                self.region_errors += 1  # not started yet, or removed while read
                continue
            claim = [owner.namespace, record.name, uid, owner.namespace, owner.pod]
            for d in usage.devices:
                labels = [*claim, d.device, d.gpu_uuid]
                for key, family in families.items():
                    family.add_metric(labels, getattr(d, key))
                oom.add_metric(labels, d.oom_refusals)
        yield from families.values()
        yield oom
        errors = CounterMetricFamily(
            "carve_metrics_region_errors", "Scrapes that skipped an allocation whose region was unreadable."
        )
        errors.add_metric([], self.region_errors)
        yield errors


class DevicePluginMetrics:
    def __init__(self, allocations_dir: Path, node_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        build_info(self.registry, "device-plugin")
        self.registry.register(AllocationsCollector(allocations_dir, node_name))


VERBS = ("filter", "prioritize", "bind")
# bad_request: 400/404/413 (the caller's); internal: 500 (ours); refused: the verb answered with an Error
# (bind failed, no node fits for a reason the pod must fix); none: not an error (not counted).
ERROR_KINDS = ("bad_request", "internal", "refused")
# The scheduler calls filter for every pod and node list; most take well under a millisecond.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ExtenderMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        build_info(r, "scheduler-extender")
        self.duration = Histogram(
            "carve_extender_request_duration_seconds",
            "Time to answer a filter, prioritize or bind call.",
            ["verb"],
            buckets=BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "carve_extender_errors",
            "Calls that ended in an error, by verb and kind (bad_request, internal, refused).",
            ["verb", "kind"],
            registry=r,
        )
        self.assignments = Counter(
            "carve_extender_assignments",
            "Pods bound with a GPU assignment (its record written, the Binding created).",
            registry=r,
        )
        for verb in VERBS:  # every series exists from the start, so rate() and alerts see zeros
            self.duration.labels(verb)
            for kind in ERROR_KINDS:
                self.errors.labels(verb, kind)

    def observe(self, verb: str, seconds: float, kind: str = "") -> None:
        """One call: its duration, and its error kind ('' = none)."""
        if verb not in VERBS:
            return
        self.duration.labels(verb).observe(seconds)
        if kind:
            self.errors.labels(verb, kind).inc()
        elif verb == "bind":
            self.assignments.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
