"""`--strategy auto` in the simulator: the controller's own planner (driver/controller/planner.py) deciding
which idle GPUs change strategy, in simulated time, with the policy's hysteresis.

The event loop calls `plan()` when a pod finds no node (over every node with an idle GPU, for that pod)
and after every departure (over that node only: the waiting pods, and the consolidation of idle GPUs):
the planner only ever looks at nodes whose state changed, so its cost follows the events, not the
cluster size. A change is applied at once (the simulated plugin has nothing to wait for: the GPU is
idle by construction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from api.v1alpha1.partitioning import PartitioningPolicySpec
from driver.controller.nodes import NodeState, PublishedGpu
from driver.controller.planner import Pending, PlanInput, Planner
from driver.devices import Settings
from driver.simulate.cluster import SimCluster, SimNode, device_classes, restrategize


class AutoPlanner:
    def __init__(
        self,
        cluster: SimCluster,
        policy: PartitioningPolicySpec | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.cluster = cluster
        self.policy = policy or PartitioningPolicySpec()
        self.settings = settings or Settings()
        self.planner = Planner(self.settings)
        self.classes = device_classes()
        self.history: dict[str, list[float]] = {}
        self.changes = 0
        self.plans = 0  # planner runs (a run needs a node with an idle GPU)
        self._could: dict[int, bool] = {}

    def _state(self, node: SimNode) -> NodeState:
        return NodeState(
            name=node.name,
            gpus=[PublishedGpu(g, node.strategies[g.index], True) for g in node.gpu_list],
            allocated=dict(node.claims),
            busy={uuid for uuid, load in node.gpus.items() if load.holders},
            paused=node.pinned,
            settings=self.settings,
        )

    def could_fit(self, claims: list[dict[str, Any]], shape: int) -> bool:
        """Whether some node, empty and with every GPU under one strategy the policy allows, takes the pod."""
        if shape not in self._could:
            group = Pending("", "", tuple(claims), 0.0)
            key = f"could-fit/{shape}"
            found = False
            rule = self.policy.rule_for({})
            for node in self.cluster.nodes:
                if node.pinned or rule is None or found:
                    continue
                by_model: dict[str, list] = {}
                for g in node.gpu_list:
                    by_model.setdefault(g.product, []).append(g)
                for gpus in by_model.values():
                    pg = PublishedGpu(gpus[0], node.strategies[gpus[0].index], True)
                    if any(
                        self.planner.need(pg, len(gpus), s, group, key, self.classes) is not None
                        for s in rule.allowed_strategies
                    ):
                        found = True
                        break
            self._could[shape] = found
        return self._could[shape]

    def plan(
        self,
        now: float,
        nodes: Sequence[SimNode],
        waiting: list[tuple[int, list[dict[str, Any]], float, str]],
    ) -> list[SimNode]:
        """Plan for the waiting pods over `nodes` and apply the changes; returns the nodes changed."""
        # Only a node with an idle GPU can change; the waiting pods were just tried on the others as they are.
        candidates = [n for n in nodes if not n.pinned and any(not g.holders for g in n.gpus.values())]
        if not candidates:
            return []
        states = {n.name: self._state(n) for n in candidates}
        inp = PlanInput(
            nodes=list(states.values()),
            classes=self.classes,
            pending=[
                Pending(f"pod{i}", "", tuple(claims), since, shape) for i, claims, since, shape in waiting
            ],
            policy=self.policy,
            now=now,
            history=self.history,
            known_unfit=True,
        )
        plan = self.planner.plan(inp)
        self.plans += 1
        by_node: dict[str, dict[int, str]] = {}
        for c in plan.changes:
            by_node.setdefault(c.node, {})[c.index] = c.to_strategy
            self.history.setdefault(c.uuid, []).append(now)
        changed = []
        for node in candidates:
            if node.name in by_node:
                for index, strategy in by_node[node.name].items():
                    old = node.strategies[index]
                    self.cluster.strategies[old] -= 1
                    self.cluster.strategies[strategy] = self.cluster.strategies.get(strategy, 0) + 1
                restrategize(node, by_node[node.name], self.settings)
                self.changes += len(by_node[node.name])
                changed.append(node)
        self.cluster.strategies = {k: v for k, v in sorted(self.cluster.strategies.items()) if v}
        return changed
