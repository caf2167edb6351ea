"""Each GPU's strategy at start: the chart's `--strategy` rules, the Node's `gpu.carve.dev/strategy`
annotation over them, and the fallback for a GPU that cannot run what its rule gives (docs/devices.md).

Who set each strategy (`sources`), which rule gave it (`rules`) and every fallback announced (`fallbacks`)
are kept for the plugin's status and the NodePartitioning. A fallback is announced once per GPU and wanted
strategy: a warning line, a Node Event (`StrategyFallback`) and the fallback metric. An annotation that does
not parse is ignored with a Node Event (`StrategyAnnotationInvalid`): the chart's rules hold.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from driver import names
from driver.devices.rules import (
    SOURCE_DEFAULT,
    SOURCE_FALLBACK,
    SOURCE_PINNED,
    RuleError,
    StrategyRules,
    can_run,
    parse_rules,
    resolve,
)
from driver.gpu.model import Gpu
from driver.metrics import PluginMetrics
from driver.plugin.events import node_event
from driver.plugin.logfmt import event
from driver.plugin.toolkit import mig_manager

log = logging.getLogger(__name__)


@dataclass
class NodeStrategies:
    node_name: str
    chart_rules: str  # --strategy
    fallback_strategy: str  # --fallback-strategy
    cluster: object  # reads the Node, creates Events where it can (driver/cluster)
    metrics: PluginMetrics
    rules: dict[int, str] = field(default_factory=dict)  # GPU index -> the rule that gave its strategy
    sources: dict[int, str] = field(default_factory=dict)  # GPU index -> who set it (rules.SOURCES)
    fallbacks: dict[str, dict[str, str]] = field(default_factory=dict)  # GPU uuid -> fallback announced

    def resolve(self, gpus: list[Gpu]) -> tuple[dict[int, str], set[int]]:
        """Each GPU's strategy (the fallback where it cannot run its own) and the GPUs the rules pin.
        Never raises for one GPU."""
        chart = parse_rules(self.chart_rules)
        annotation = self._annotation_rules()
        for where, rules in (("--strategy", chart), (names.ANNOTATION_STRATEGY, annotation)):
            if rules is not None:
                self._warn_unused(rules, where, gpus)
        strategies: dict[int, str] = {}
        pinned: set[int] = set()
        mig_managed = mig_manager(self._node_labels())
        for gpu in gpus:
            r = resolve([gpu], chart, annotation)[gpu.index]
            self.rules[gpu.index] = r.rule
            if r.pinned:
                pinned.add(gpu.index)
            why = can_run(gpu, r.strategy)
            if not why and r.strategy == names.STRATEGY_MIG:
                why = mig_managed  # the GPU Operator's MIG manager would undo carve's MIG changes
            if why:
                strategies[gpu.index] = self.fallback_strategy
                self.sources[gpu.index] = SOURCE_FALLBACK
                self.announce_fallback(gpu, r.strategy, r.rule, why)
            else:
                strategies[gpu.index] = r.strategy
                self.sources[gpu.index] = SOURCE_PINNED if r.pinned else SOURCE_DEFAULT
        return strategies, pinned

    def announce_fallback(self, gpu: Gpu, wanted: str, rule: str, why: str) -> None:
        """Once per GPU and wanted strategy: a warning line, a Node Event (StrategyFallback), the metric."""
        fallback = self.fallback_strategy
        if self.fallbacks.get(gpu.uuid, {}).get("wanted") == wanted:
            return
        self.fallbacks[gpu.uuid] = {
            "index": str(gpu.index),
            "wanted": wanted,
            "strategy": fallback,
            "rule": rule,
        }
        event(
            log,
            logging.WARNING,
            "strategy.fallback",
            gpu=gpu.name,
            uuid=gpu.uuid,
            product=gpu.product,
            rule=rule or "(built-in default)",
            wanted=wanted,
            strategy=fallback,
            reason=why,
        )
        self.metrics.observe_fallback(gpu.uuid, gpu.index, wanted, fallback)
        self.node_event(
            "StrategyFallback",
            f"GPU {gpu.index} ({gpu.product}, {gpu.uuid}): rule {rule or '(built-in default)'!r} gives "
            f"{wanted}, but {why}; it runs {fallback} (--fallback-strategy)",
        )

    def node_event(self, reason: str, message: str) -> None:
        if not hasattr(self.cluster, "create_event"):
            return
        try:
            self.cluster.create_event("default", node_event(self.node_name, reason, message))
        except Exception as e:  # an Event is a courtesy: never stop the plugin for it
            event(
                log, logging.WARNING, "strategy.event-failed", reason=reason, error=f"{type(e).__name__}: {e}"
            )

    def _node_labels(self) -> dict[str, str]:
        try:
            obj = self.cluster.get_object("nodes", self.node_name)  # type: ignore[attr-defined]
        except Exception:  # no API server, no RBAC, a file cluster without the Node: no labels known
            return {}
        return dict((obj.get("metadata") or {}).get("labels") or {})

    def _annotation_rules(self) -> StrategyRules | None:
        """The node's `gpu.carve.dev/strategy` annotation as rules; None when absent, unreadable or invalid
        (then the chart's rules hold, and the log and a Node Event say why)."""
        node = self.node_name
        try:
            obj = self.cluster.get_object("nodes", node)  # type: ignore[attr-defined]
        except Exception as e:  # no API server, no RBAC for nodes, a file cluster: the chart's rules hold
            event(
                log,
                logging.DEBUG,
                "strategy.annotation-unreadable",
                node=node,
                error=f"{type(e).__name__}: {e}",
            )
            return None
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_STRATEGY)
        if text is None:
            return None
        try:
            return parse_rules(text, f"Node {node} annotation {names.ANNOTATION_STRATEGY}", pin_default=True)
        except RuleError as e:
            event(
                log, logging.ERROR, "strategy.annotation-invalid", node=node, error=str(e), action="ignored"
            )
            self.node_event("StrategyAnnotationInvalid", f"{e}; the chart's --strategy rules apply")
            return None

    @staticmethod
    def _warn_unused(rules: StrategyRules, where: str, gpus: list[Gpu]) -> None:
        for text in rules.unmatched(gpus):
            event(
                log,
                logging.WARNING,
                "strategy.rule-unmatched",
                rule=text,
                source=where,
                gpus=[f"{g.index}:{g.product}" for g in gpus],
            )
        for text in rules.shadowed(gpus):
            event(
                log,
                logging.WARNING,
                "strategy.rule-shadowed",
                rule=text,
                source=where,
                detail="an earlier rule matches every GPU it matches (first match wins)",
            )
