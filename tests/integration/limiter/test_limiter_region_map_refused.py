"""When the kernel refuses the limiter the memory for its own regions (an anonymous mmap of one region's size
failing with ENOMEM, as under an exhausted RLIMIT_AS), the limiter still starts, and each of its regions keeps
its own counters: the environment's quota for the process fits to the byte, and a claim whose limits are
unusable still refuses everything. Had the private and the closed regions shared one fallback, the closed
one's byte "in use" would have taken a byte of the private quota.

native/tests/no_mmap_of.c makes exactly those mmaps fail (a seccomp filter on the length and MAP_ANONYMOUS);
the claim's region file is mapped shared, not anonymously, so it still maps.
"""

from __future__ import annotations

import json

from limiter_harness import BUILD, require_native

from driver.limits.region import REGION_SIZE

NO_MMAP_OF = BUILD / "tests" / "no_mmap_of"
CLIENT = BUILD / "tests" / "limiter_client_cuda_nvml"
MIB = 1 << 20
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2


def multi(c, *allocations: str, **env: str) -> tuple[list[int], str]:
    require_native()
    proc = c.run(str(REGION_SIZE), str(CLIENT), "multi", *allocations, program=NO_MMAP_OF, **env)
    return json.loads(proc.stdout.strip().splitlines()[-1])["rc"], proc.stderr


def test_the_environments_quota_fits_to_the_byte_without_mapped_regions(claim):
    c = claim(gpus="2xT4")
    env = {"CARVE_REGION": "", "CARVE_MEMORY_LIMIT_0": "8M", "CARVE_MEMORY_LIMIT_1": "4M"}
    rc, err = multi(c, f"0:{8 * MIB}", f"1:{4 * MIB}", **env)
    assert rc == [CUDA_SUCCESS, CUDA_SUCCESS], err
    rc, err = multi(c, f"0:{8 * MIB}", "0:1", f"1:{4 * MIB + 1}", **env)
    assert rc == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY], err


def test_a_claim_whose_limits_are_unusable_still_refuses_without_mapped_regions(claim):
    c = claim(gpus="2xT4").create(memory=64 * MIB)
    c.region.unlink()
    c.region.write_bytes(b"x" * 4096)  # not a region: the claim is closed, in a region of the limiter's own
    rc, err = multi(c, f"0:{1 * MIB}", f"1:{1 * MIB}")
    assert rc == [CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS], err  # GPU 1 is not the claim's: not closed
    assert f"region {c.region} is unusable" in err, err
