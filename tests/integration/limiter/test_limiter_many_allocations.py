"""More live allocations than the limiter's table holds (65,536 slots, native/src/table.c): the ones past
it spill into the overflow list, and every free, in any order, still releases exactly what its allocation
charged. A client with many small buffers (a framework's caching allocator off, a graph of tiny tensors)
reaches this; a lost entry would leave its bytes charged until the process exits, a wrong one would
release someone else's size (survivors of generated mutants in table.c's spill and probe paths)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from driver.limits import Region

MIB = 1 << 20

SCRIPT = textwrap.dedent(
    """
    import ctypes, json, random, sys
    n, size = int(sys.argv[1]), int(sys.argv[2])
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    def free_now():
        assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        return free.value
    alloc, release = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
    ptrs = []
    # sizes of 1 to 4 pages, so that an entry read back from the wrong slot releases the wrong size
    for i in range(n):
        p = ctypes.c_uint64()
        rc = alloc(ctypes.byref(p), ctypes.c_size_t(size * (1 + i % 4)))
        if rc != 0:
            print(json.dumps({"failed_at": i, "rc": rc}))
            sys.exit(1)
        ptrs.append((p.value, size * (1 + i % 4)))
    out = {"free_full": free_now(), "total": total.value, "charged": sum(s for _, s in ptrs)}
    # arrays made while the table is full: spilled too, each found again by its own kind when destroyed
    class Desc(ctypes.Structure):
        _fields_ = [("w", ctypes.c_size_t), ("h", ctypes.c_size_t), ("f", ctypes.c_int), ("c", ctypes.c_uint)]
    arrays = []
    for w in (256, 512, 1024):
        a = ctypes.c_void_p()
        assert cuda.cuArrayCreate_v2(ctypes.byref(a), ctypes.byref(Desc(w, 64, 0x20, 1))) == 0  # float
        arrays.append(a)
    out["free_arrays"] = free_now()
    for a in arrays:
        assert cuda.cuArrayDestroy(a) == 0
    out["free_arrays_gone"] = free_now()
    random.Random(7).shuffle(ptrs)  # frees in another order than the allocations: the spill list's removal
    half = len(ptrs) // 2
    for p, _ in ptrs[:half]:
        assert release(ctypes.c_uint64(p)) == 0
    out["free_half"] = free_now()
    out["charged_half"] = sum(s for _, s in ptrs[half:])
    # the freed half allocated again: slots left by the frees (tombstones) and the spill's holes are reused
    again = []
    for _, s in ptrs[:half]:
        p = ctypes.c_uint64()
        assert alloc(ctypes.byref(p), ctypes.c_size_t(s)) == 0
        again.append(p.value)
    out["free_again"] = free_now()
    for p, _ in ptrs[half:]:
        assert release(ctypes.c_uint64(p)) == 0
    for p in again:
        assert release(ctypes.c_uint64(p)) == 0
    out["free_empty"] = free_now()
    print(json.dumps(out))
    """
)


def test_allocations_past_the_table_are_charged_and_released_exactly(claim):
    n, page = 70_000, 4096  # 70,000 live > 65,536 slots
    limit = 1024 * MIB  # above the ~683 MiB the 70,000 buffers charge, below the fake T4's 16 GiB
    c = claim().create(memory=limit)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(n), str(page)], env=c.env(), capture_output=True, text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["total"] == limit
    assert res["free_full"] == limit - res["charged"]
    arrays = 4 * 64 * (256 + 512 + 1024)  # 4-byte floats, 64 rows
    assert res["free_arrays"] == res["free_full"] - arrays
    assert res["free_arrays_gone"] == res["free_full"]
    assert res["free_half"] == limit - res["charged_half"]
    assert res["free_again"] == limit - res["charged"]
    assert res["free_empty"] == limit
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 0
        assert r.peak_bytes(0) == res["charged"] + arrays


REUSE = textwrap.dedent(
    """
    import ctypes, json
    cuda = ctypes.CDLL("libcuda.so.1")
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    def free_now():
        assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
        return free.value
    held = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(held), ctypes.c_size_t(64 << 12)) == 0
    seen, reused, after = {}, 0, []
    for i in range(300):
        size = 512 * (1 + (i * 7) % 8)  # all within one page: the same address comes back
        p = ctypes.c_uint64()
        assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)) == 0
        if p.value in seen and seen[p.value] != size:
            reused += 1
        seen[p.value] = size
        assert cuda.cuMemFree_v2(ctypes.c_uint64(p.value)) == 0
        after.append(free_now())
    print(json.dumps({"reused": reused, "after": sorted(set(after)), "total": total.value}))
    """
)


def test_an_address_freed_and_allocated_again_at_another_size_releases_the_new_size(claim):
    # A driver hands a freed address out again (here for a buffer of another size within the same page);
    # the limiter's entry for the old allocation must be gone, or the next free of that address releases
    # the old size (releasing too much lets the claim past its quota, too little leaks it).
    limit = 64 * MIB
    c = claim().create(memory=limit)
    proc = subprocess.run(
        [sys.executable, "-c", REUSE], env=c.env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["reused"] > 0, "the fake driver never gave an address out again: nothing was tested"
    assert res["after"] == [limit - 64 * 4096]  # after every free: only the held buffer is charged
