"""A release of more than a claim's count leaves the count at zero, never below (limiter.h,
carve_sub_clamped). The region is writable inside the container, so its count may be lower than what a
process holds: written down by a tenant's own process, or by the plugin's repair of a region. Were the
subtraction to wrap, the claim's count would read about 2^64 bytes and every later allocation of the claim
would be refused, each of its processes' included.

The client holds 4 MiB of an 8 MiB claim; the test writes the claim's count down to 1 MiB; the client frees
its 4 MiB and then asks for the whole quota, which must fit."""

from __future__ import annotations

import textwrap

from limiter_harness import CUDA_CONTEXT, python_client

from driver.limits import Region

MIB = 1 << 20
CUDA_SUCCESS = 0

SCRIPT = CUDA_CONTEXT + textwrap.dedent(
    """
    import sys
    held, whole = ctypes.c_uint64(), ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(held), ctypes.c_size_t(4 << 20)) == 0
    print("held", flush=True)
    sys.stdin.readline()
    freed = cuda.cuMemFree_v2(held)
    print(freed, cuda.cuMemAlloc_v2(ctypes.byref(whole), ctypes.c_size_t(8 << 20)), flush=True)
    """
)


def test_a_release_past_the_claims_count_leaves_it_at_zero(claim) -> None:
    c = claim().create(memory=8 * MIB)
    client = python_client(SCRIPT, c.env())
    assert client.stdout.readline().strip() == "held", client.stderr.read()
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 4 * MIB
        r._struct.devices[0].memory_used = 1 * MIB
    out, err = client.communicate("go\n", timeout=60)
    assert client.returncode == 0, err
    assert out.split() == [str(CUDA_SUCCESS), str(CUDA_SUCCESS)], err
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 0  # the client is gone: its 8 MiB went back
