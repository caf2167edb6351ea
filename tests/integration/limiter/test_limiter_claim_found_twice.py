"""A claim is mapped once, however the limiter comes to it: CARVE_REGION names it and the scan of the
regions root finds it again. A claim whose region is unusable (fail closed) has no region to be recognised
by, only its limits file: found again, it must not be added a second time (two entries, its error logged
twice). And the environment the limiter reads is the one the process started with, however many other
variables it holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from limiter_harness import LIMITER, write_claim

from driver.limits import ClaimLimits, DeviceLimit

MIB = 1 << 20

SCRIPT = textwrap.dedent(
    f"""
    import ctypes, json
    cuda = ctypes.CDLL("libcuda.so.1")
    limiter = ctypes.CDLL({str(LIMITER)!r})
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    p = ctypes.c_uint64()
    alloc = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20))
    region = ctypes.create_string_buffer(4096)
    index = limiter.carveLimiterDeviceRegion(0, region, len(region))
    print(json.dumps({{"count": limiter.carveLimiterRegionCount(), "total": total.value, "alloc": alloc,
                       "region": [index, region.value.decode()]}}))
    """
)


def run(env: dict[str, str]) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_a_claim_with_an_unusable_region_found_again_by_the_scan_is_mapped_once(claim):
    c = claim().create(memory=64 * MIB)
    c.region.unlink()
    c.region.write_bytes(b"x" * 4096)  # not a region: the claim fails closed
    # CARVE_REGION's claim lies in the root the limiter scans: the scan comes to it a second time
    out, log = run(c.env(CARVE_REGION_DIR=str(c.tmp.parent)))
    assert (out["count"], out["alloc"]) == (1, 2), log  # one claim, closed: the allocation is refused
    # the diagnostics name the claim's region and say why nothing fits (carveLimiterDeviceRegion)
    assert out["region"] == [0, f"{c.region} (unusable: closed)"], log
    assert log.count("is unusable: allocations on this claim's GPUs are refused") == 1, log


def test_the_limiters_variables_count_behind_hundreds_of_others(claim):
    c = claim()
    # the process's environment in this order: 400 variables of the application's first, the limiter's last
    env = {f"APP_SETTING_{i:03}": "x" for i in range(400)}
    env |= c.env(CARVE_REGION="", CARVE_MEMORY_LIMIT=str(8 * MIB))
    out, log = run(env)
    assert out["total"] == 8 * MIB, log


def test_a_claim_two_names_of_the_regions_root_lead_to_is_mapped_once(claim, tmp_path):
    # CARVE_REGION's claim first, then the root's: "a" and "b", a second name (a symlink) for "a"
    c = claim().create(memory=64 * MIB)
    root = tmp_path / "root"
    region = root / "a" / "region"
    region.parent.mkdir(parents=True)
    write_claim(region, ClaimLimits(devices=(DeviceLimit(8 * MIB, 0),), region_path=str(region)))
    (root / "b").symlink_to(root / "a", target_is_directory=True)
    out, log = run(c.env(CARVE_REGION_DIR=str(root)))
    assert out["count"] == 2, log  # CARVE_REGION's claim and "a", each once
