"""The driver's own reservation (nvml.h: v1's `used` is "Sum of Reserved and Allocated device memory", v2
reports `reserved` apart) seen without and with the limiter. A real driver reserves some hundreds of MiB on
every GPU; the fake reserves $CARVE_FAKE_RESERVED_MIB. Under a claim's quota, the limiter reports the quota
as the device: no reservation of its own, total = used + free in both versions, and CUDA agrees."""

from __future__ import annotations

from limiter_harness import Claim, require_native

MIB = 1 << 20
T4 = 15360 * MIB  # the fake T4's memory (common/models.c)
RESERVED = 512 * MIB


def _reports(claim: Claim, **env: str) -> tuple[dict, dict]:
    return claim.json("info", **env), claim.json("nvml2", **env)


def test_the_fake_driver_reports_its_reservation_as_the_header_says(tmp_path):
    require_native()
    c = Claim(tmp=tmp_path).create(memory=64 * MIB)
    info, v2 = _reports(c, preload=False, CARVE_FAKE_RESERVED_MIB=str(RESERVED // MIB))
    assert (v2["rc"], v2["total"], v2["reserved"], v2["used"]) == (0, T4, RESERVED, 0)
    assert v2["free"] == T4 - RESERVED
    assert (info["nvml_total"], info["nvml_used"], info["nvml_free"]) == (T4, RESERVED, T4 - RESERVED)
    assert (info["total"], info["free"]) == (T4, T4 - RESERVED)  # cuMemGetInfo: the reservation is not free


def test_the_reservation_cannot_be_allocated(tmp_path):
    require_native()
    c = Claim(tmp=tmp_path).create(memory=0)
    env = {"preload": False, "CARVE_FAKE_RESERVED_MIB": str(T4 // MIB - 1)}  # 1 MiB left to allocate
    assert c.run("alloc", str(2 * MIB), **env).stdout.strip() == "2"  # CUDA_ERROR_OUT_OF_MEMORY
    assert c.run("alloc", str(MIB), **env).stdout.strip() == "0"


def test_under_a_quota_the_limiter_reports_no_reservation_and_whole_totals(tmp_path):
    require_native()
    c = Claim(tmp=tmp_path).create(memory=64 * MIB)
    info, v2 = _reports(c, CARVE_FAKE_RESERVED_MIB=str(RESERVED // MIB))
    assert (v2["rc"], v2["total"], v2["reserved"]) == (0, 64 * MIB, 0)
    assert v2["used"] + v2["free"] == v2["total"]
    assert info["nvml_total"] == 64 * MIB and info["nvml_used"] + info["nvml_free"] == 64 * MIB
    assert info["nvml_used"] == info["region_used"]  # the claim's own use, not the driver's reservation
    assert (info["total"], info["free"]) == (64 * MIB, 64 * MIB)
