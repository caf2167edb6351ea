"""The long-running processes' heap: what their start-up allocated is kept out of the cyclic collector.

A full (oldest-generation) collection walks every tracked object, and a started plugin holds about 70,000
of them (the kubernetes client's models, gRPC, pydantic, the CEL environment), almost all of them alive
until it exits: a full collection costs 14 ms and more, and it fires in the middle of whatever call
crossed the collector's threshold. With 8 prepares at once that is the p99 of all 8
(docs/performance.md, "Seventh pass"). `gc.freeze()` moves every object tracked so far into a generation
the collector never walks; objects made later are collected as before, so a full collection walks only
what the process built since. Cyclic garbage made during start-up is collected first, so freezing does not
keep it alive.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect start-up garbage, then freeze what is left; returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
