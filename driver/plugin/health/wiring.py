"""One node's GPU health pipeline, wired: the NVML monitor's changes become slice marks (taints, or
withdrawal where the cluster has no device taints), Node Events, metrics and the kubelet's health stream.

The plugin (server.py) owns the lifecycle and the publisher; this module owns what a health change means.
The monitor, the policy and the pure pieces live beside it (monitor.py, policy.py, taints.py, service.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from driver.gpu.model import Gpu
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.health.monitor import STATE_FILE, HealthMonitor
from driver.plugin.health.policy import Change, TaintPolicy, describe, parse_xids
from driver.plugin.health.service import DeviceReport, HealthBroadcast
from driver.plugin.health.taints import health_event, health_marks
from driver.plugin.logfmt import event

log = logging.getLogger(__name__)


@dataclass
class NodeHealth:
    node_name: str
    gpus: list[Gpu]
    policy: TaintPolicy
    cluster: object  # create_event(namespace, body) where the cluster client has it
    metrics: object  # PluginMetrics: observe_health(changes, gpus, unhealthy)
    republish: Callable[[], None]  # wake the publisher: the slices change with the health
    taints_off: Callable[[], bool]  # the cluster has no device taints: unhealthy devices are withdrawn
    devices: Callable[[], dict[str, NodeDevice]]  # every device of the node, published or withdrawn
    monitor: HealthMonitor | None = None
    broadcast: HealthBroadcast = field(init=False)

    def __post_init__(self) -> None:
        self.broadcast = HealthBroadcast(self.reports)

    def start_monitor(self, plugin_dir: Path, recovery_s: float, ignore_xids: str, interval_s: float) -> None:
        """Start watching NVML; before the first publish, so a GPU found (or remembered) unhealthy is never
        offered."""
        self.monitor = HealthMonitor(
            [(g.uuid, g.index) for g in self.gpus],
            self.on_change,
            plugin_dir / STATE_FILE,
            recovery_s=recovery_s,
            ignored_xids=parse_xids(ignore_xids),
            interval_s=interval_s,
        )
        self.monitor.start()

    def observe_start(self) -> None:
        self.metrics.observe_health([], self._gpu_ids(), self.unhealthy())

    def stop(self) -> None:
        self.broadcast.close()  # ends the kubelet's health streams, so the servers stop at once
        if self.monitor:
            self.monitor.stop()

    def unhealthy(self) -> dict[int, str]:
        """GPU index -> cause, for the GPUs unhealthy now."""
        return self.monitor.unhealthy() if self.monitor else {}

    def marks(self, k8s_version: str) -> dict:
        """build_slices' taints/withdrawn for the GPUs unhealthy now (taints.py)."""
        if self.monitor is None:
            return {}
        return health_marks(
            self.monitor.unhealthy(), self.policy, taints_off=self.taints_off(), k8s_version=k8s_version
        )

    def on_change(self, changes: list[Change]) -> None:
        """A GPU flipped: republish (taint, withdraw or clear), Node Event, metrics, the kubelet's stream."""
        withdrawn = self.taints_off()
        self.metrics.observe_health(changes, self._gpu_ids(), self.unhealthy())
        for ch in changes:
            gpu = next((g for g in self.gpus if g.uuid == ch.uuid), None)
            body = health_event(
                self.node_name,
                ch,
                f"gpu-{gpu.minor}" if gpu else ch.uuid,
                describe(ch.cause),
                withdrawn=withdrawn,
                effect=self.policy.taint(ch.cause)["effect"],
            )
            if withdrawn and not ch.healthy:
                event(
                    log,
                    logging.WARNING,
                    "health.withdrawn",
                    gpu=ch.uuid,
                    cause=ch.cause,
                    detail="device taints are off on this cluster: the GPU's devices leave the pool",
                )
            if hasattr(self.cluster, "create_event"):
                try:
                    self.cluster.create_event("default", body)
                except Exception as e:  # an Event is a courtesy; the taint is what counts
                    event(
                        log,
                        logging.WARNING,
                        "health.event-failed",
                        gpu=ch.uuid,
                        error=f"{type(e).__name__}: {e}",
                    )
        self.broadcast.publish()
        self.republish()

    def reports(self) -> list[DeviceReport]:
        """Every device of the node (withdrawn ones too: pods still hold them) with its GPU's health."""
        bad = self.unhealthy()
        index_of = {g.uuid: g.index for g in self.gpus}
        out = []
        for name, d in sorted(self.devices().items()):
            cause = bad.get(index_of.get(d.gpu_uuid, -1), "")
            out.append(DeviceReport(self.node_name, name, not cause, describe(cause) if cause else ""))
        return out

    def _gpu_ids(self) -> list[tuple[str, int]]:
        return [(g.uuid, g.index) for g in self.gpus]
