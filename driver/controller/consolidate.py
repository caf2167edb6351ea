"""Consolidation: once every waiting claim of a plan was looked at, idle GPUs return to their home
strategy (the portfolio's choice for the GPU, else the plugins' bare default rule, else the node rule's
default), hysteresis permitting, so a GPU switched for one claim does not stay that way for good. Pure:
it changes the node states of the plan in progress and returns the changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from driver.controller.hysteresis import can_run, changeable
from driver.controller.nodes import NodeState, PublishedGpu
from driver.controller.plan import Change, PlanInput


def consolidate(nodes: Sequence[NodeState], inp: PlanInput, changed: Counter[str], made: int) -> list[Change]:
    """Idle GPUs back to their node's default strategy once nothing waits for what they run: a GPU left
    `exclusive` (or `mig`) after the claim it changed for ended would otherwise hold a whole GPU per
    small pod from then on. Only when every waiting claim was looked at (none young or deferred): the
    ones that fit are booked on busy GPUs and the others fit nowhere either way, so no waiting claim
    loses its place. Hysteresis applies as to any change. `changed` (GPU uuid -> changes in this plan) is
    updated; `made` changes of this plan count against its --max-changes."""
    out: list[Change] = []
    for node in nodes:
        rule = inp.policy.rule_for(node.labels)
        if node.paused or rule is None:
            continue
        # Home: the plugins' bare default rule where the policy allows it and the GPU can run it (so
        # `plugin.strategy=mig` keeps every MIG GPU in MIG), else the policy's default.
        home = node.home if node.home in rule.allowed_strategies else None

        chosen = inp.homes.get(node.name, {})

        def target(
            p: PublishedGpu, home: str | None = home, fallback: str = rule.default_strategy,
            chosen: dict[int, str] = chosen, allowed: list[str] = rule.allowed_strategies,
        ) -> str:
            # The portfolio's home for this GPU first (same model as `carve simulate`), where the
            # policy allows it and the GPU can run it.
            mine = chosen.get(p.gpu.index)
            if mine is not None and mine in allowed and can_run(p, mine):
                return mine
            return home if home is not None and can_run(p, home) else fallback

        back = [
            p
            for p in changeable(node, inp, changed)
            if p.strategy != target(p) and can_run(p, target(p))
        ]
        back = back[: max(0, inp.max_changes - made - len(out))]
        if not back:
            continue
        before = node.strategies
        node.apply({p.gpu.index: target(p) for p in back}, None)
        for p in back:
            changed[p.gpu.uuid] += 1
            out.append(
                Change(
                    node.name,
                    p.gpu.index,
                    p.gpu.uuid,
                    before[p.gpu.index],
                    target(p),
                    (f"idle GPU to its home {target(p)} chosen by the portfolio: no waiting claim "
                     f"needs {before[p.gpu.index]}; {inp.homes_why}"
                     if chosen.get(p.gpu.index) == target(p) and inp.homes_why else
                     f"idle GPU back to node {node.name}'s default {target(p)}: no waiting claim "
                     f"needs {before[p.gpu.index]}"),
                    (),
                )
            )
    return out

