"""freeze_startup_heap: what start-up left alive is kept out of later collections, and the cyclic garbage
it left is collected first, not frozen with it. Run in an interpreter of its own: a test process's other
threads (left by earlier tests) may be in a collection of their own, which makes a gc.collect() return
without collecting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SCRIPT = """
import gc, weakref
from driver.heap import freeze_startup_heap

class Node:
    other = None

alive = Node()
garbage = Node()
garbage.other = Node()
garbage.other.other = garbage  # a cycle: only the cyclic collector frees it
gone = weakref.ref(garbage)
del garbage
gc.disable()  # the script decides when collections run
frozen = freeze_startup_heap()
print("collected", gone() is None)
print("counted", frozen == gc.get_freeze_count() > 0)
print("walked", any(o is alive for o in gc.get_objects()))
gc.unfreeze()
print("walked after unfreeze", any(o is alive for o in gc.get_objects()))
"""


def test_startup_garbage_is_collected_and_the_rest_frozen():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.splitlines() == [
        "collected True",  # collected before the freeze, not kept alive for good
        "counted True",
        "walked False",  # frozen: no collection walks it
        "walked after unfreeze True",
    ], done.stdout + done.stderr
