"""A claim whose region file is gone or broken while its limits file is the plugin's fails closed (binding.c,
add_claim): each of its GPUs gets a limit of one byte with that one byte in use, so not even one byte more
fits, and every report (cuMemGetInfo, cuDeviceTotalMem, NVML) shows a GPU of one byte, all of it used: what
nvidia-smi and frameworks then see is a GPU with no room, not one with a byte free. Every GPU of the claim,
not only its first."""

from __future__ import annotations

import pytest
from limiter_harness import write_claim

from driver.limits import ClaimLimits, DeviceLimit

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY = 2


@pytest.mark.parametrize("damage", ["deleted", "garbage"])
def test_a_claim_whose_region_is_broken_has_no_byte_free(claim, damage: str) -> None:
    c = claim().create(memory=64 * MIB)
    c.region.unlink()
    if damage == "garbage":
        c.region.write_bytes(b"x" * 4096)
    assert c.run("alloc", "1", CARVE_MEMORY_LIMIT="1T").stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY)
    out = c.json("info")
    seen = {k: out[k] for k in ("total", "free", "device_total", "nvml_total", "nvml_used", "nvml_free")}
    one_byte = {"total": 1, "free": 0, "device_total": 1, "nvml_total": 1, "nvml_used": 1, "nvml_free": 0}
    assert seen == one_byte, out


def test_every_gpu_of_a_claim_whose_region_is_broken_has_no_byte_free(claim) -> None:
    c = claim(gpus="2xT4")
    two = (DeviceLimit(64 * MIB, 0), DeviceLimit(64 * MIB, 0))  # by position: ordinals 0 and 1
    write_claim(c.region, ClaimLimits(devices=two, region_path=str(c.region)))
    c.region.unlink()
    for ordinal in (0, 1):
        out = c.run("alloc", "1", CLIENT_ORDINAL=str(ordinal))
        assert out.stdout.strip() == str(CUDA_ERROR_OUT_OF_MEMORY), (ordinal, out.stderr)
