"""Node policies: the order in which a pod tries nodes. The first node where all its claims fit wins.

Trying nodes best-score-first and stopping at the first fit is the same as the scheduler's
filter-then-score when the score depends only on the node's load, and it costs one allocation per
placed pod instead of one per node.

- `kube` models the default scheduler's spreading (NodeResourcesFit, LeastAllocated): emptiest node first.
- `binpack` models MostAllocated: fullest node first, so whole nodes stay free for big pods.
Ties go to the node listed first in cluster.yaml (the real scheduler picks among ties at random; a
fixed order keeps runs reproducible).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from driver.simulate.cluster import SimNode


class NodePolicy(Protocol):
    name: str

    def order(self, nodes: Sequence[SimNode]) -> list[SimNode]:
        """The nodes in the order a pod tries them."""
        ...


class Spread:
    name = "kube"

    def order(self, nodes: Sequence[SimNode]) -> list[SimNode]:
        return sorted(nodes, key=lambda n: n.load)  # sorted() is stable: ties keep cluster order


class BinPack:
    name = "binpack"

    def order(self, nodes: Sequence[SimNode]) -> list[SimNode]:
        return sorted(nodes, key=lambda n: -n.load)


POLICIES: dict[str, NodePolicy] = {p.name: p for p in (Spread(), BinPack())}
