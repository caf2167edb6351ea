"""An executable graph the application destroys is forgotten: the driver may hand its handle to the next
graph, and that graph's launches are charged for their own kernels, not for the destroyed graph's.

native/tests/limiter_refusal_cuda's `regraph` instantiates a graph of one 8-block kernel through the limiter
(which records 8 blocks for its handle) and destroys it, then instantiates one by a path the limiter does not
see (the refusing driver's refusingCudaInstantiateUnseen), which the fake driver's allocator gives the freed
handle, as a real driver's pool does. (The fake allocates with calloc, which glibc never serves from its
per-thread cache: the cache is turned off in the client, GLIBC_TUNABLES, so the freed memory comes back.) A
graph the limiter has no record of is charged one block a launch (test_limiter_refusals.py).
"""

from __future__ import annotations

import json

from limiter_harness import BUILD, FAKES

CLIENT = BUILD / "tests" / "limiter_refusal_cuda"
REFUSING = BUILD / "refusing"
MIB = 1 << 20


def test_a_destroyed_graphs_handle_given_again_is_charged_for_the_new_graph(claim):
    c = claim(gpus="1xA100-80GB").create(memory=8 * MIB, cores=50)
    out = c.run(
        "regraph", "25", program=CLIENT, LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}",
        GLIBC_TUNABLES="glibc.malloc.tcache_count=0",
    )
    (step,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert step["rc"] == 0 and step["same"] == 1, step  # the driver gave the destroyed graph's handle again
    # one block a launch (the feedback thread may add a launch of its own measure): not 8 x 25 = 200
    assert step["launches"] <= step["charged"] < 2 * step["launches"], step
