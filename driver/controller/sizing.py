"""What an empty node needs: how many GPUs of a model, under a strategy, an empty node of that many GPUs
takes for a pending group (the planner's score, and the simulator's question "could any change help?").
Asked of carve's allocator on kept what-if nodes; the answers are kept across plans, since they depend
only on the model, the node's size, the strategy and the claim shape. Pure: no I/O, caches only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from driver.allocator import Allocator
from driver.controller.demand import devices_asked
from driver.controller.nodes import PublishedGpu, device_gpus, try_allocate
from driver.controller.plan import Pending
from driver.devices import STRATEGIES, ModelError, Settings, build_slices
from driver.gpu.model import Gpu


class EmptyNodes:
    """Kept empty what-if nodes and what each claim shape needs on them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._need: dict[tuple[str, int, str, str], int | None] = {}
        self._empty: dict[tuple[str, int, str, int], tuple[list[dict[str, Any]], Allocator]] = {}

    def need(
        self,
        pg: PublishedGpu,
        count: int,
        strategy: str,
        group: Pending,
        shape: str,
        classes: list[dict[str, Any]],
    ) -> int | None:
        """GPUs of `pg`'s model under `strategy` an empty node of `count` such GPUs needs for the group:
        the GPUs its allocation there touches (the allocator fills GPUs in order, so that is the fewest);
        None when it does not fit at all. One allocation per model, size, strategy and claim shape."""
        key = (pg.gpu.product, count, strategy, shape)
        if key not in self._need:
            self._need[key] = None
            try:
                STRATEGIES[strategy].check(pg.gpu)
            except ModelError:
                return None
            # Most claims fit one GPU; a claim of n devices may need n; only then try every GPU.
            for k in sorted({1, min(count, devices_asked(group.claims)), count}):
                slices, allocator = self._pristine(pg, k, strategy, classes)
                got = try_allocate(allocator, "what-if", list(group.claims), keep=False)
                if got is not None:
                    parent = device_gpus(slices)
                    used = {
                        parent[r["device"]]
                        for a in got
                        for r in a["devices"]["results"]
                        if r["device"] in parent
                    }
                    self._need[key] = max(1, len(used))
                    break
        return self._need[key]

    def _pristine(self, pg: PublishedGpu, k: int, strategy: str, classes: list[dict[str, Any]]):
        """An empty node of k GPUs of pg's model under `strategy`, kept: allocations on it are tried and
        taken back, and its CEL results serve every claim shape asked about it."""
        key = (pg.gpu.product, k, strategy, id(classes))
        found = self._empty.get(key)
        if found is None:
            gpus = [_renumbered(pg, i) for i in range(k)]
            slices = build_slices(
                "what-if",
                gpus,
                {i: strategy for i in range(k)},
                self.settings,
                k8s_version="1.36",
                validate=False,
            )
            found = self._empty[key] = (slices, Allocator(slices, classes))
        return found



def _renumbered(pg: PublishedGpu, i: int) -> Gpu:
    return dataclasses.replace(pg.gpu, index=i, minor=i, uuid=f"{pg.gpu.uuid}-what-if-{i}")
