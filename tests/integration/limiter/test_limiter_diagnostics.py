"""The limiter's diagnostics (docs/limiter.md: `carveLimiterVersion`, `carveLimiterRegionShared`,
`carveLimiterRegionCount`, `carveLimiterDeviceRegion`), and which claims a process maps from its regions root:
at most 16, in name order, hidden names and directories without a limits file left out, a root that cannot be
listed logged and skipped.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from limiter_harness import LIMITER, write_claim

from driver.limits import ClaimLimits, DeviceLimit, create_region

MIB = 1 << 20

SCRIPT = textwrap.dedent(
    f"""
    import ctypes, json
    cuda = ctypes.CDLL("libcuda.so.1")
    limiter = ctypes.CDLL({str(LIMITER)!r})
    limiter.carveLimiterVersion.restype = ctypes.c_char_p
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cuda.cuCtxSetCurrent(ctx) == 0
    regions = {{}}
    for ordinal in (-1, 0, 1, 16):
        path = ctypes.create_string_buffer(b"unchanged", 4096)
        regions[ordinal] = [limiter.carveLimiterDeviceRegion(ordinal, path, len(path)), path.value.decode()]
    print(json.dumps({{
        "version": limiter.carveLimiterVersion().decode(),
        "shared": limiter.carveLimiterRegionShared(),
        "count": limiter.carveLimiterRegionCount(),
        "regions": regions,
        "no_buffer": limiter.carveLimiterDeviceRegion(0, None, 0),
        # no buffer, whatever length comes with it: the index alone, nothing written
        "no_buffer_sized": limiter.carveLimiterDeviceRegion(0, None, 4096),
    }}))
    """
)


def diagnostics(c, **env: str) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=c.env(**env), capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_a_claims_process_sees_its_shared_region_and_which_ordinal_it_limits(claim):
    c = claim(gpus="2xT4").create(memory=8 * MIB)  # the claim's limits name one device: ordinal 0
    out, _ = diagnostics(c)
    assert out["version"].startswith("carve-limiter ")
    assert (out["shared"], out["count"], out["no_buffer"], out["no_buffer_sized"]) == (1, 1, 0, 0)
    none = [-1, "unchanged"]
    assert out["regions"] == {"-1": none, "0": [0, str(c.region)], "1": none, "16": none}


def test_without_a_region_the_environments_limits_are_per_process(claim):
    c = claim(gpus="2xT4")
    out, _ = diagnostics(c, CARVE_REGION="", CARVE_MEMORY_LIMIT=str(8 * MIB))
    assert (out["shared"], out["count"]) == (0, 0)
    none = [-1, "unchanged"]
    assert out["regions"] == {"-1": none, "0": [0, "(environment)"], "1": [1, "(environment)"], "16": none}


def test_the_regions_root_gives_at_most_16_claims_in_name_order(claim, tmp_path):
    root = tmp_path / "root"
    names = [f"c{i:02}" for i in range(17)]
    for name in [*names, ".hidden"]:
        region = root / name / "region"
        region.parent.mkdir(parents=True)
        write_claim(region, ClaimLimits(devices=(DeviceLimit(8 * MIB, 0),), region_path=str(region)))
    # a region without a limits file is no claim of the plugin's: not mapped, and it takes no place
    (root / "b-region-only").mkdir()
    alone = root / "b-region-only" / "region"
    create_region(alone, ClaimLimits(devices=(DeviceLimit(0, 0),), region_path=str(alone)))
    c = claim()
    out, log = diagnostics(c, CARVE_REGION="", CARVE_REGION_DIR=str(root))
    assert out["count"] == 16 and out["shared"] == 0
    warned = re.findall(
        r"^carve-limiter\[\d+\] warn: more than 16 claim regions; (.*) is not limited$", log, re.M
    )
    # (the limiter also scans /var/run/carve, whatever this test's machine has there)
    assert [w for w in warned if not w.startswith("/var/run/carve/")] == [str(root / "c16" / "region")], log


def test_a_regions_root_that_cannot_be_listed_is_logged_and_skipped(claim, tmp_path):
    root = tmp_path / "root"
    root.write_text("a file, not a directory")
    c = claim().create(memory=8 * MIB)
    out, log = diagnostics(c, CARVE_REGION_DIR=str(root))
    assert (out["count"], out["regions"]["0"]) == (1, [0, str(c.region)])
    assert re.search(
        rf"^carve-limiter\[\d+\] warn: regions root {root}: cannot list it \(Not a directory\)$", log, re.M
    )


@pytest.mark.parametrize(
    ("memory_a", "memory_b", "winner"),
    [
        (8 * MIB, 8 * MIB, "a"),  # a tie: the first in name order
        (4 * MIB, 8 * MIB, "a"),
        (8 * MIB, 4 * MIB, "b"),  # the tightest, wherever it is
        (0, 8 * MIB, "b"),  # no limit is the loosest
        (8 * MIB, 0, "a"),
    ],
)
def test_among_untrusted_limits_files_naming_a_gpu_the_tightest_limits_it(
    claim, tmp_path, memory_a, memory_b, winner
):
    c = claim()
    uuid = json.loads(c.run("uuids").stdout)[0]
    root = tmp_path / "root"
    for name, memory in (("a", memory_a), ("b", memory_b)):
        region = root / name / "region"
        region.parent.mkdir(parents=True)
        write_claim(
            region, ClaimLimits(devices=(DeviceLimit(memory, 0, uuid=uuid),), region_path=str(region))
        )
    out, _ = diagnostics(
        c, CARVE_REGION="", CARVE_REGION_DIR=str(root)
    )  # no CARVE_LIMITS_SOURCE: none trusted
    assert out["regions"]["0"] == [0, str(root / winner / "region")]


@pytest.mark.parametrize("with_claim", [True, False], ids=["claim-of-two-devices", "environment"])
def test_an_ordinal_past_the_drivers_devices_is_limited_by_nothing(claim, with_claim):
    # one GPU, limits for more: the claim's second device (or the environment's, which covers 16) is no
    # ordinal the driver has, so nothing is bound to ordinal 1
    c = claim(gpus="1xT4")
    env = {"CARVE_MEMORY_LIMIT": str(8 * MIB)}
    if with_claim:
        devices = (DeviceLimit(8 * MIB, 0), DeviceLimit(4 * MIB, 0))
        write_claim(c.region, ClaimLimits(devices=devices, region_path=str(c.region)))
        env = {}
    else:
        env["CARVE_REGION"] = ""
    out, _ = diagnostics(c, **env)
    where = str(c.region) if with_claim else "(environment)"
    assert out["regions"]["0"] == [0, where]
    assert out["regions"]["1"] == [-1, "unchanged"]
