"""A process past the limiter's table that allocates and frees in a loop keeps its memory flat: a freed
entry leaves the overflow list.

The limiter tracks each live allocation in a fixed table of 65,536 slots (native/src/table.c); past it,
entries spill into an overflow list that grows as needed. A process holding more live buffers than the
table (test_limiter_many_allocations.py) that goes on allocating and freeing one more, as a training loop
does each step, puts every new entry on the list and takes it off at the free. If a free left its entry's
place on the list, the list would grow by an entry (24 bytes) every step, without end, and every later free
would search a longer list. Measured with glibc's mallinfo2 (the bytes malloc has handed out, mmap'd blocks
included) around a run of such steps, after a first run that has brought every list to its working size.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import HEAP_CLIENT

MIB = 1 << 20
LIVE = 70_000  # past the table's 65,536 slots: every new allocation spills
STEPS = 10_000
PAGE = 4096

SCRIPT = HEAP_CLIENT + textwrap.dedent(
    f"""
    import json
    alloc, release = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
    live, p, size = [], ctypes.c_uint64(), ctypes.c_size_t({PAGE})
    for _ in range({LIVE}):
        assert alloc(ctypes.byref(p), size) == 0
        live.append(p.value)
    def steps():
        for _ in range({STEPS}):
            assert alloc(ctypes.byref(p), size) == 0
            assert release(ctypes.c_uint64(p.value)) == 0
    steps()
    before = heap()
    steps()
    print(json.dumps({{"grew": heap() - before}}))
    """
)


def test_allocating_and_freeing_past_the_table_does_not_grow_the_process(claim):
    c = claim(gpus="1xA100-80GB").create(memory=60 * 1024 * MIB)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    grew = json.loads(proc.stdout.strip().splitlines()[-1])["grew"]
    # at its working size the list allocates nothing; one that kept each freed entry would have grown by at
    # least STEPS entries of 24 bytes (240 KB)
    assert grew < 64 * 1024, grew
