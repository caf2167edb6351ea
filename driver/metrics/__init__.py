"""carve metrics: the kubelet plugin's Prometheus exporter (docs/metrics.md lists every series).

`PluginMetrics` holds one registry per plugin: counters fed by the gRPC service and the publisher, and a
collector that reads prepared claims, inventory and each soft/slot claim's region at scrape time.
`MetricsServer` serves it on --metrics-addr.
"""

from driver.metrics.collector import GpuState, PluginState, StateCollector
from driver.metrics.exporter import MetricsServer, PluginMetrics, claim_result, plugin_state

__all__ = [
    "GpuState",
    "MetricsServer",
    "PluginMetrics",
    "PluginState",
    "StateCollector",
    "claim_result",
    "plugin_state",
]
