"""The limiter's accounting when the driver refuses: what a claim's region counts must stay what the claim
holds, whatever the driver answers.

native/tests/limiter_refusal_cuda runs steps under the limiter against a driver that refuses what its
environment names (native/tests/refusing/refusing_cuda.c: a libcuda.so.1 in front of the unchanged fake,
found first on LD_LIBRARY_PATH) and prints the claim's region counter after each step. Both bugs below once
survived the whole suite (issue 33): a quota check written `used + bytes > limit`, which a near-2^64
request wraps around, and a free the driver refused releasing the claim's quota anyway. Either way the
counter ends below what the claim holds and its processes can take more than their quota.
"""

from __future__ import annotations

import json

import pytest
from limiter_harness import BUILD, FAKES

CLIENT = BUILD / "tests" / "limiter_refusal_cuda"
REFUSING = BUILD / "refusing"
MIB = 1 << 20
CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_ILLEGAL_ADDRESS = 0, 1, 2, 700


@pytest.fixture
def refusing(claim):
    for needed in (CLIENT, REFUSING / "libcuda.so.1"):
        if not needed.exists():
            pytest.fail(f"{needed} missing: run `make native`")

    def run(*steps: str, memory: int = 8 * MIB, cores: int = 0, **env: str) -> list[dict]:
        c = claim(gpus="1xA100-80GB").create(memory=memory, cores=cores)
        out = c.run(*steps, program=CLIENT, LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}", **env)
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    return run


def test_a_request_near_2_64_is_refused_by_the_limiter_and_the_counter_keeps_what_is_held(refusing):
    huge = (1 << 64) - 2 * MIB  # used + huge wraps around to 2 MiB below the quota
    # the driver, too, refuses what it cannot place
    steps = refusing("alloc", str(4 * MIB), "alloc", str(huge), "alloc", str(4 * MIB + 1),
                     "alloc", str(4 * MIB), REFUSING_CUDA_ALLOC_OVER=str(1 << 40))
    assert [(s["rc"], s["used"]) for s in steps] == [
        (CUDA_SUCCESS, 4 * MIB),
        (CUDA_ERROR_OUT_OF_MEMORY, 4 * MIB),  # refused, and the 4 MiB held are still counted
        (CUDA_ERROR_OUT_OF_MEMORY, 4 * MIB),  # so no second quota: 4 MiB + 1 byte more does not fit
        (CUDA_SUCCESS, 8 * MIB),
    ]


def test_an_allocation_the_driver_refuses_gives_its_reservation_back(refusing):
    steps = refusing("alloc", str(2 * MIB), "alloc", str(4 * MIB), "alloc", str(6 * MIB),
                     REFUSING_CUDA_ALLOC_OVER=str(3 * MIB))
    assert [(s["rc"], s["used"]) for s in steps] == [
        (CUDA_SUCCESS, 2 * MIB),
        (CUDA_ERROR_OUT_OF_MEMORY, 2 * MIB),  # within quota, refused by the driver: nothing charged
        (CUDA_ERROR_OUT_OF_MEMORY, 2 * MIB),
    ]


@pytest.mark.parametrize("free", ["free", "afree"], ids=["cuMemFree_v2", "cuMemFreeAsync"])
def test_a_free_the_driver_refuses_keeps_the_memory_charged(refusing, free):
    steps = refusing("alloc", str(4 * MIB), free, "alloc", str(6 * MIB), free, "alloc", str(6 * MIB),
                     REFUSING_CUDA_FREE="1")
    assert [(s["step"], s["rc"], s["used"]) for s in steps] == [
        ("alloc", CUDA_SUCCESS, 4 * MIB),
        (free, CUDA_ERROR_ILLEGAL_ADDRESS, 4 * MIB),  # the memory is still allocated: still charged
        ("alloc", CUDA_ERROR_OUT_OF_MEMORY, 4 * MIB),  # 4 + 6 MiB is over the 8 MiB quota
        (free, CUDA_SUCCESS, 0),  # the driver frees it now: released exactly once
        ("alloc", CUDA_SUCCESS, 6 * MIB),
    ]


def test_a_graph_the_limiter_has_no_record_of_is_charged_on_each_launch(refusing):
    # Instantiated by a path the limiter does not see, the graph's kernels are unknown to it: each launch
    # is charged one block at least, so the feedback loop still counts it against the claim's share.
    (step,) = refusing("graph", "25", cores=50)
    assert step["rc"] == CUDA_SUCCESS
    assert step["charged"] >= step["launches"] == 25, step


def test_a_pitched_allocation_is_charged_at_the_drivers_pitch_whatever_it_picks(refusing):
    # the limiter reserves width rounded to 512 bytes, then settles on the pitch the driver chose
    steps = refusing(
        "pitch", "1100", "100", "3",  # the driver refuses (an element size it has no pitch for)
        "pitch", "1100", "100", "4",  # 512-byte pitch: the estimate was right
        "free",
        "env", "CARVE_FAKE_PITCH_ALIGN=256",
        "pitch", "1100", "100", "4",  # a tighter pitch than the estimate: the difference is given back
        "free",
        "env", "CARVE_FAKE_PITCH_ALIGN=4096",
        "pitch", "1100", "2100", "4",  # the estimate fits the quota, the driver's pitch does not
        "pitch", "1100", "100", "4",
        memory=8 * MIB,
    )
    pitches = [(s["rc"], s["pitch"], s["used"], s["driver"]) for s in steps if s["step"] == "pitch"]
    assert pitches == [
        (CUDA_ERROR_INVALID_VALUE, 0, 0, 0),
        (CUDA_SUCCESS, 1536, 1536 * 100, 1536 * 100),
        (CUDA_SUCCESS, 1280, 1280 * 100, 1280 * 100),
        # refused, and the driver's allocation freed: neither the claim nor the GPU keeps any of it
        (CUDA_ERROR_OUT_OF_MEMORY, 0, 0, 0),
        (CUDA_SUCCESS, 4096, 4096 * 100, 4096 * 100),
    ]
