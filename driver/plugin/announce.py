"""What the plugin tells the operator about the node's setup at start and after a publish: NVIDIA container
toolkit settings that hand out GPUs past carve (toolkit.py finds them), and feature gates the API server has
off. Each is a log line, a metric and a Node Event, so it shows where the operator looks."""

from __future__ import annotations

import logging
from pathlib import Path

from driver.metrics import PluginMetrics
from driver.plugin.logfmt import event
from driver.plugin.strategies import NodeStrategies
from driver.plugin.toolkit import toolkit_findings

log = logging.getLogger(__name__)


class Announcer:
    def __init__(self, metrics: PluginMetrics, strategies: NodeStrategies):
        self.metrics = metrics
        self.strategies = strategies  # its node_event posts the Node Events

    def toolkit(self, host_root: Path) -> None:
        """Toolkit settings that hand out GPUs past carve: a warning, a Node Event, a metric each."""
        for f in toolkit_findings(host_root):
            event(log, logging.WARNING, "toolkit.unsafe", setting=f.setting, path=f.path, detail=f.detail)
            self.metrics.observe_toolkit_finding(f.setting, f.path)
            self.strategies.node_event(
                "ContainerToolkitUnsafe",
                f'NVIDIA container toolkit {f.path}: {f.setting}: {f.detail} (docs/install.md, "Nodes with '
                'the NVIDIA container toolkit and the GPU Operator")',
            )

    def gates_off(self, gates: set[str], changed: dict[int, str]) -> None:
        """A gate the API server has off: the metric and a Node Event, besides the publisher's log line."""
        self.metrics.observe_gates_off(gates)
        what = ", ".join(f"GPU {i}: {c}" for i, c in sorted(changed.items())) or "no GPU's strategy changed"
        self.strategies.node_event(
            "FeatureGatesOff",
            f"the API server has {', '.join(sorted(gates))} off (it drops their fields): soft slices run as "
            f"slots, MIG and time-slicing as whole GPUs ({what}); turn the gates on (docs/install.md, "
            '"Feature gates per Kubernetes version")',
        )
