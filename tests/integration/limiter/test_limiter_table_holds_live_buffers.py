"""Live allocations within the limiter's table cost the process no heap: the table is fixed (65,536 slots,
native/src/table.c) and its hot path takes no lock; only past it do entries go to an overflow list, which
is allocated and guarded by a mutex (test_limiter_spill_list_shrinks.py). A table that lost its slots (an
entry left half-written, never published) would send every allocation to that list: right answers, but a
heap that grows with every live buffer and a lock on every allocation and free.

Measured with glibc's mallinfo2 (the bytes malloc has handed out, mmap'd blocks included) around the
allocation of 20,000 buffers held live (their pointers go to an array made before the measurement), once
with the limiter and once without: the fake driver's own bookkeeping is the same in both runs. The buffers
are of 1 to 13 pages, so their addresses collide in the table's hash as a real program's do (buffers of one
size, laid end to end, spread over the slots without a collision, and never probe past their first slot).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import HEAP_CLIENT

MIB = 1 << 20
LIVE = 20_000  # well within the table's 65,536 slots
PAGE = 4096

SCRIPT = HEAP_CLIENT + textwrap.dedent(
    f"""
    import json
    alloc, size = cuda.cuMemAlloc_v2, ctypes.c_size_t({PAGE})
    pointers = (ctypes.c_uint64 * {LIVE})()
    p = ctypes.c_uint64()
    assert alloc(ctypes.byref(p), size) == 0 and cuda.cuMemFree_v2(p) == 0  # the first call's own setup
    before = heap()
    for i in range({LIVE}):
        size = ctypes.c_size_t({PAGE} * (1 + (i * 7919) % 13))
        assert alloc(ctypes.byref(pointers, 8 * i), size) == 0
    print(json.dumps({{"grew": heap() - before}}))
    """
)


def heap_growth(env: dict[str, str]) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])["grew"]


def test_live_buffers_within_the_table_take_no_heap(claim):
    c = claim(gpus="1xA100-80GB").create(memory=60 * 1024 * MIB)
    with_limiter, without = heap_growth(c.env()), heap_growth(c.env(preload=False))
    # an overflow list holding them all would take at least LIVE entries of 24 bytes (480 KB); one holding the
    # few a table that probes badly gives up on (its linear probe stuck on one slot: a thousand or so
    # here) takes 24 KB; a table that works takes nothing
    assert with_limiter - without < 4096, (with_limiter, without)


CHURN = HEAP_CLIENT + textwrap.dedent(
    """
    import json
    p, size = ctypes.c_uint64(), ctypes.c_size_t(4096)
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), size) == 0 and cuda.cuMemFree_v2(p) == 0
    before = heap()
    for _ in range(2000):
        assert cuda.cuMemAlloc_v2(ctypes.byref(p), size) == 0 and cuda.cuMemFree_v2(p) == 0
    print(json.dumps({"grew": heap() - before}))
    """
)


def test_a_buffer_allocated_and_freed_over_and_over_takes_no_heap(claim):
    # A free leaves its slot a tombstone, which the next allocation reuses. A table that did not would walk
    # one slot further at each round (the fake driver hands the same address back, the same first slot)
    # and, past its 512-slot probe, put every allocation on the overflow list: 24 KB of heap here.
    c = claim(gpus="1xA100-80GB").create(memory=1024 * MIB)
    proc = subprocess.run(
        [sys.executable, "-c", CHURN], env=c.env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["grew"] < 4096, proc.stdout
