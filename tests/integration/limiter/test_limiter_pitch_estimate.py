"""A pitched allocation is judged against the claim's quota before the driver places it: the limiter reserves
the width rounded up to the driver's usual 512-byte pitch, so an allocation that fits to the byte is granted,
and one that does not is refused without ever reaching the driver (no transient allocation another tenant of
the GPU could be refused for). A width near 2^64, whose rounding would wrap around, is refused the same way.

native/tests/limiter_refusal_cuda's `pitch` step reports how many cuMemAllocPitch_v2 calls reached the driver
("asked", counted by the test driver native/tests/refusing/refusing_cuda.c, which forwards them unchanged to
the fake, whose pitch is the width rounded up to 512 bytes).
"""

from __future__ import annotations

import json

import pytest
from limiter_harness import BUILD, FAKES

CLIENT = BUILD / "tests" / "limiter_refusal_cuda"
REFUSING = BUILD / "refusing"
MIB = 1 << 20
QUOTA = 8 * MIB
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2


def pitches(claim, *steps: str, quota: int = QUOTA) -> list[tuple[int, int, int, int]]:
    for needed in (CLIENT, REFUSING / "libcuda.so.1"):
        if not needed.exists():
            pytest.fail(f"{needed} missing: run `make native`")
    c = claim(gpus="1xA100-80GB").create(memory=quota)
    out = c.run(*steps, program=CLIENT, LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}")
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return [(s["rc"], s["used"], s["driver"], s["asked"]) for s in lines if s["step"] == "pitch"]


def test_a_pitched_allocation_that_fills_the_quota_to_the_byte_is_granted(claim):
    # 2048-byte rows (already a 512-byte multiple) x 4096 rows: the quota exactly
    assert pitches(claim, "pitch", "2048", "4096", "4") == [(CUDA_SUCCESS, QUOTA, QUOTA, 1)]


def test_a_pitched_allocation_over_the_quota_is_refused_before_the_driver_places_it(claim):
    # 2049-byte rows take a 2560-byte pitch: 3500 of them are over the quota, though 2048-byte rows would fit
    assert 2048 * 3500 < QUOTA < 2560 * 3500
    assert pitches(claim, "pitch", "2049", "3500", "4", "pitch", "2049", "3000", "4") == [
        (CUDA_ERROR_OUT_OF_MEMORY, 0, 0, 0),  # the driver was never asked
        (CUDA_SUCCESS, 2560 * 3000, 2560 * 3000, 1),  # the same rows, fewer of them: granted at the pitch
    ]


@pytest.mark.parametrize("width", [(1 << 64) - 511, (1 << 64) - 1], ids=["wraps-to-0", "max"])
def test_a_width_whose_rounding_would_wrap_is_refused_before_the_driver(claim, width):
    # (width + 511) overflows 64 bits: rounded naively it would be a few bytes, charged as nothing
    assert pitches(claim, "pitch", str(width), "1", "4") == [(CUDA_ERROR_OUT_OF_MEMORY, 0, 0, 0)]


# (quota, width): a request the quota holds, however large, is the driver's to refuse (it cannot place it)
WITHIN = [
    ((1 << 64) - (1 << 40), 1 << 60),  # a quota of 16777215 TiB (the environment's largest) and 1 EiB
    ((1 << 64) - 512, (1 << 64) - 512),  # the largest width that rounds without wrapping, exactly the quota
]


@pytest.mark.parametrize(("quota", "width"), WITHIN, ids=["exbibyte", "quota-to-the-byte"])
def test_a_huge_pitched_request_the_quota_holds_is_the_drivers_to_refuse(claim, quota, width):
    assert pitches(claim, "pitch", str(width), "1", "4", quota=quota) == [(CUDA_ERROR_OUT_OF_MEMORY, 0, 0, 1)]
