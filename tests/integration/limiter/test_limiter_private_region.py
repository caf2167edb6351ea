"""A workload without CARVE_REGION (no plugin, no claim): the environment's limits hold for the process alone,
to the byte, on each device, whatever the limiter keeps for a claim whose limits are broken.

The limiter keeps two regions of its own in every process: the private one (the environment's limits, this
process alone) and the closed one (every allocation refused: 1 byte counted "in use" against a 1-byte quota).
Were they one, the private quota would start 1 byte short: an allocation of exactly the quota is the test.
"""

from __future__ import annotations

import json

MIB = 1 << 20
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2


def multi(c, *allocations: str, **env: str) -> list[int]:
    proc = c.run("multi", *allocations, CARVE_REGION="", **env)
    return json.loads(proc.stdout.strip().splitlines()[-1])["rc"]


def test_exactly_the_environments_quota_fits_and_one_byte_more_does_not(claim):
    c = claim(gpus="2xT4")
    env = {"CARVE_MEMORY_LIMIT_0": "8M", "CARVE_MEMORY_LIMIT_1": "4M"}
    assert multi(c, f"0:{8 * MIB}", f"1:{4 * MIB}", **env) == [CUDA_SUCCESS, CUDA_SUCCESS]
    assert multi(c, f"0:{8 * MIB}", "0:1", f"1:{4 * MIB + 1}", **env) == [
        CUDA_SUCCESS,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_OUT_OF_MEMORY,
    ]
    assert not c.region.exists()  # no claim: nothing shared was created


def test_without_carve_region_no_region_file_is_looked_for(claim):
    """No CARVE_REGION: the environment's limits, per process, with one info line saying so; no region file is
    opened or created (an empty path would be, and logged as an error at every start)."""
    c = claim()
    proc = c.run("multi", f"0:{MIB}", CARVE_REGION="", CARVE_MEMORY_LIMIT_0="8M", CARVE_LOG="info")
    assert "no CARVE_REGION: the environment's limits are enforced per process" in proc.stderr, proc.stderr
    assert "cannot open or create" not in proc.stderr, proc.stderr


def test_a_free_after_the_limiters_exit_handler_gives_the_private_quota_back(claim):
    """A process of the environment's limits alone frees after the limiter's exit handler (a C++ static
    destructor does) and then allocates again: its private quota is its own, so the free gives it back, and
    the allocation fits. (With a claim's region, frees after the exit handler release nothing, as the exit
    handler gave the process's usage back: test_limiter_fork.py.)"""
    c = claim()
    proc = c.run("exitfree", str(8 * MIB), "1", "again", CARVE_REGION="", CARVE_MEMORY_LIMIT_0="8M")
    assert proc.stdout.split() == [str(CUDA_SUCCESS), str(CUDA_SUCCESS)], proc.stderr
