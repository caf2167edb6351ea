"""A CUDA array's destroy that the driver refuses keeps the array charged, and the destroy that then succeeds
releases it exactly once: the claim's counter stays what the claim holds.

native/tests/limiter_refusal_cuda creates arrays and mipmapped arrays under the limiter against the refusing
driver (native/tests/refusing/refusing_cuda.c, `REFUSING_CUDA_DESTROY=N`: the first N destroys fail with
CUDA_ERROR_ILLEGAL_ADDRESS and leave the array allocated, as a driver with a sticky error does).
"""

from __future__ import annotations

import json

import pytest
from limiter_harness import BUILD, FAKES

CLIENT = BUILD / "tests" / "limiter_refusal_cuda"
REFUSING = BUILD / "refusing"
MIB = 1 << 20
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_ILLEGAL_ADDRESS = 0, 2, 700
# 1024 x 1024 one-channel float texels: 4 MiB a level; a second level adds a quarter
ARRAY = ("1024", "1024")


@pytest.fixture
def refusing(claim):
    for needed in (CLIENT, REFUSING / "libcuda.so.1"):
        if not needed.exists():
            pytest.fail(f"{needed} missing: run `make native`")

    def run(*steps: str, **env: str) -> list[tuple[str, int, int]]:
        c = claim(gpus="1xA100-80GB").create(memory=8 * MIB)
        out = c.run(*steps, program=CLIENT, LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}", **env)
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        return [(s["step"], s["rc"], s["used"]) for s in lines]

    return run


@pytest.mark.parametrize(
    "create",
    [("array", *ARRAY), ("mipmap", *ARRAY, "1")],
    ids=["cuArrayDestroy", "cuMipmappedArrayDestroy"],
)
def test_a_destroy_the_driver_refuses_keeps_the_array_charged_until_one_succeeds(refusing, create):
    kind = create[0]
    steps = refusing(*create, "destroy", "alloc", str(6 * MIB), "destroy", "alloc", str(6 * MIB),
                     REFUSING_CUDA_DESTROY="1")
    assert steps == [
        (kind, CUDA_SUCCESS, 4 * MIB),
        ("destroy", CUDA_ERROR_ILLEGAL_ADDRESS, 4 * MIB),  # still allocated: still charged
        ("alloc", CUDA_ERROR_OUT_OF_MEMORY, 4 * MIB),  # 4 + 6 MiB is over the 8 MiB quota
        ("destroy", CUDA_SUCCESS, 0),  # the driver destroys it now: released, once
        ("alloc", CUDA_SUCCESS, 6 * MIB),
    ]


def test_after_a_refused_destroy_each_array_is_released_once_at_its_own_size(refusing):
    # a mipmapped array of two levels (2 MiB + 512 KiB) beside a plain 4 MiB array: the refused destroy keeps
    # the mipmap's charge under its own handle, so each later destroy releases what its array holds
    steps = refusing("array", *ARRAY, "mipmap", "512", "1024", "2", "destroy", "destroy", "destroy",
                     REFUSING_CUDA_DESTROY="1")
    assert steps == [
        ("array", CUDA_SUCCESS, 4 * MIB),
        ("mipmap", CUDA_SUCCESS, 4 * MIB + 2 * MIB + MIB // 2),
        ("destroy", CUDA_ERROR_ILLEGAL_ADDRESS, 4 * MIB + 2 * MIB + MIB // 2),
        ("destroy", CUDA_SUCCESS, 4 * MIB),
        ("destroy", CUDA_SUCCESS, 0),
    ]
