"""A driver that cannot tell a device's UUID (cuDeviceGetUuid_v2 fails) leaves the limiter the device's
position: the claim's limits file names its GPU by UUID, and the ordinal is still bound to that device of
the claim (docs/limiter.md, rule 4), so its quota holds. Read as a UUID, whatever the failed call left in
its buffer would name no claim's GPU and leave the device unlimited.

native/tests/limiter_refusal_cuda runs against the refusing test driver
(native/tests/refusing/refusing_cuda.c, REFUSING_CUDA_UUID), as in test_limiter_refusals.py.
"""

from __future__ import annotations

import json

import pytest
from limiter_harness import BUILD, FAKES

CLIENT = BUILD / "tests" / "limiter_refusal_cuda"
REFUSING = BUILD / "refusing"
MIB = 1 << 20
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_UNKNOWN = 0, 2, 999


@pytest.mark.parametrize("uuid_known", [True, False], ids=["uuid-known", "uuid-unknown"])
def test_a_device_whose_uuid_the_driver_cannot_tell_keeps_its_claims_quota(claim, uuid_known):
    for needed in (CLIENT, REFUSING / "libcuda.so.1"):
        if not needed.exists():
            pytest.fail(f"{needed} missing: run `make native`")
    c = claim(gpus="1xA100-80GB")
    uuid = json.loads(c.run("uuids").stdout)[0]
    c.create(memory=8 * MIB, uuid=uuid)  # named by UUID, as the plugin writes it
    env = {} if uuid_known else {"REFUSING_CUDA_UUID": str(CUDA_ERROR_UNKNOWN)}
    out = c.run(
        "alloc",
        str(6 * MIB),
        "alloc",
        str(6 * MIB),
        program=CLIENT,
        LD_LIBRARY_PATH=f"{REFUSING}:{FAKES}",
        CARVE_MEMORY_LIMIT="1T",
        **env,
    )
    steps = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(s["rc"], s["used"]) for s in steps] == [
        (CUDA_SUCCESS, 6 * MIB),
        (CUDA_ERROR_OUT_OF_MEMORY, 6 * MIB),  # 12 MiB is over the claim's 8
    ], out.stderr
