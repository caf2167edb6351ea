"""Which GPUs of a node a plan may change now: idle, modelled, not pinned, outside the policy's kept share
(`keepPercent`, the highest indices), past `minHold` since their last change and under
`maxChangesPerHour`, not changed already in this plan, and able to run the strategy asked. Pure.
"""

from __future__ import annotations

import math
from collections import Counter

from driver.controller.nodes import NodeState, PublishedGpu
from driver.controller.plan import PlanInput
from driver.devices import STRATEGIES, ModelError

HOUR_S = 3600.0


def changeable(node: NodeState, inp: PlanInput, changes_made: Counter[str]) -> list[PublishedGpu]:
    """Idle, modelled GPUs outside the kept share that hysteresis lets change now."""
    h = inp.policy.hysteresis
    kept = math.floor(len(node.gpus) * h.keep_percent / 100)
    pool = node.gpus[: len(node.gpus) - kept] if kept else node.gpus
    out = []
    for p in pool:
        if (
            p.gpu.uuid in node.busy
            or p.gpu.uuid in node.pinned
            or not p.modelled
            or changes_made[p.gpu.uuid]
        ):
            continue
        times = inp.history.get(p.gpu.uuid, [])
        if times and inp.now - max(times) < h.min_hold_s:
            continue
        if sum(1 for t in times if inp.now - t < HOUR_S) >= h.max_changes_per_hour:
            continue
        out.append(p)
    return out


def can_run(p: PublishedGpu, strategy: str) -> bool:
    try:
        STRATEGIES[strategy].check(p.gpu)
    except ModelError:
        return False
    return True
