"""A claim whose region file is gone or broken while its limits file is the plugin's fails closed (binding.c,
add_claim): each of its GPUs gets a limit of one byte with that one byte in use, so not even one byte more
fits, and every report (cuMemGetInfo, cuDeviceTotalMem, NVML) shows a GPU of one byte, all of it used: what
nvidia-smi and frameworks then see is a GPU with no room, not one with a byte free."""

from __future__ import annotations

import pytest

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
