"""freeze_startup_heap: what start-up left alive is kept out of later collections, and the cyclic garbage
it left is collected first, not frozen with it."""

from __future__ import annotations

import gc
import weakref

from driver.heap import freeze_startup_heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_startup_garbage_is_collected_and_the_rest_frozen():
    alive = Node()
    garbage = Node()
    garbage.other = Node()
    garbage.other.other = garbage  # a cycle: only the cyclic collector frees it
    gone = weakref.ref(garbage)
    del garbage
    gc.disable()  # the test decides when collections run
    try:
        frozen = freeze_startup_heap()
        assert gone() is None  # collected before the freeze, not kept alive for good
        assert frozen == gc.get_freeze_count() > 0
        assert not any(o is alive for o in gc.get_objects())  # frozen: no collection walks it
    finally:
        gc.unfreeze()
        gc.enable()
    assert any(o is alive for o in gc.get_objects())
