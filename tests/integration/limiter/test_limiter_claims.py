"""Several soft claims in one container: each GPU is charged to the region of its own claim, found by UUID,
whatever the CUDA ordinal order, in one process and across processes; a GPU no claim covers is not limited.

The layout is the plugin's: every claim's region at <root>/<claim-uid>/region, CARVE_REGION naming one of
them (the last claim's, as runtimes merge CDI env), and the colliding per-ordinal env limits of that claim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from limiter_harness import REPO, Claim, require_native, write_claim

from driver.limits import ClaimLimits, DeviceLimit, Region

MIB = 1 << 20
T4_MEMORY = 15360 * MIB


@pytest.fixture
def node(tmp_path: Path):
    """Two claims on a 3xT4 node: claim-a holds 64 MiB of GPU 0, claim-b 32 MiB (60%) of GPU 1."""
    require_native()
    root = tmp_path / "carve"
    base = Claim(tmp=tmp_path, gpus="3xT4", state=tmp_path / "fake.state")
    uuids = json.loads(base.run("uuids", CUDA_VISIBLE_DEVICES="0,1,2").stdout)
    regions = {}
    for uid, gpu, memory, cores in (("claim-a", 0, 64 * MIB, 30), ("claim-b", 1, 32 * MIB, 60)):
        path = root / uid / "region"
        path.parent.mkdir(parents=True)
        limits = ClaimLimits(
            devices=(DeviceLimit(memory, cores, uuid=uuids[gpu]),), region_path=str(path), core_policy="force"
        )
        write_claim(path, limits)
        regions[uid] = path
    # what the container's env holds: claim-b's values won (its CARVE_REGION, its ordinal-0 limit)
    base.extra = {
        "CARVE_REGION": str(regions["claim-b"]),
        "CARVE_REGION_DIR": str(root),
        "CARVE_MEMORY_LIMIT_0": str(32 * MIB),
        "CARVE_CORES_LIMIT_0": "60",
    }
    return base, regions, uuids


def multi(c: Claim, order: str, *allocs: str, **env: str) -> dict:
    return c.json("multi", *allocs, CUDA_VISIBLE_DEVICES=order, **env)


def test_fake_libcuda_reports_the_uuids_the_inventory_sees(node):
    c, _, uuids = node
    script = (
        "from driver.gpu import discover\n"
        "print(' '.join(g.uuid for g in sorted(discover('fake:3xT4', 'n'), key=lambda g: g.index)))\n"
    )
    env = c.env(preload=False)
    env.pop("LD_LIBRARY_PATH")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == uuids
    assert len(set(uuids)) == 3


@pytest.mark.parametrize(
    ("order", "expected_rc", "expected_total"),
    [
        ("0,1,2", [0, 2, 0], [64 * MIB, 32 * MIB, T4_MEMORY]),
        ("1,0,2", [2, 0, 0], [32 * MIB, 64 * MIB, T4_MEMORY]),
        ("2,1,0", [0, 2, 0], [T4_MEMORY, 32 * MIB, 64 * MIB]),
    ],
)
def test_each_gpu_has_its_own_claims_quota_whatever_the_ordinal_order(
    node, order, expected_rc, expected_total
):
    c, _, _ = node
    out = multi(c, order, f"0:{48 * MIB}", f"1:{48 * MIB}", f"2:{48 * MIB}")
    assert out["rc"] == expected_rc  # 48 MiB fits claim-a's 64 MiB, not claim-b's 32 MiB
    assert out["total"] == expected_total
    assert out["device_total"] == expected_total


def test_two_processes_with_different_orders_share_each_claims_quota(node):
    c, regions, _ = node
    holder = c.popen("multi", "hold", f"0:{40 * MIB}", f"1:{20 * MIB}", CUDA_VISIBLE_DEVICES="0,1")
    try:
        assert json.loads(holder.stdout.readline())["rc"] == [0, 0]
        with Region.open(regions["claim-a"]) as a, Region.open(regions["claim-b"]) as b:
            assert (a.used_bytes(0), b.used_bytes(0)) == (40 * MIB, 20 * MIB)
            assert [p.pid for p in a.processes()] == [holder.pid] == [p.pid for p in b.processes()]
        # the second process numbers the GPUs the other way round: its ordinal 1 is claim-a's GPU 0
        out = multi(c, "1,0", f"1:{40 * MIB}", f"1:{24 * MIB}", f"0:{12 * MIB}", f"0:{1 * MIB}")
        assert out["rc"] == [2, 0, 0, 2]  # a: 40 + 40 > 64, 40 + 24 fits; b: 20 + 12 fits, + 1 does not
    finally:
        holder.kill()
        holder.wait()
    # 'multi' exited: its usage went back; the killed holder's comes back at the next allocation's reclaim
    assert multi(c, "0,1", f"0:{64 * MIB}", f"1:{32 * MIB}")["rc"] == [0, 0]
    with Region.open(regions["claim-a"]) as a, Region.open(regions["claim-b"]) as b:
        assert (a.used_bytes(0), b.used_bytes(0)) == (0, 0)
        assert a.oom_refusals(0) == 1 and b.oom_refusals(0) == 1


def test_environment_limits_apply_only_where_no_region_file_speaks(node):
    c, _, _ = node
    env = {"CARVE_MEMORY_LIMIT_2": str(8 * MIB)}
    # CARVE_REGION is a plugin region with UUIDs: the claims' per-ordinal env limits are ignored
    assert multi(c, "0,1,2", **env)["total"] == [64 * MIB, 32 * MIB, T4_MEMORY]
    # no CARVE_REGION (HAMi-style env): the env limits the ordinals that no region covers
    out = multi(c, "0,1,2", CARVE_REGION="", CARVE_MEMORY_LIMIT_0="", CARVE_MEMORY_LIMIT_2=str(8 * MIB))
    assert out["total"] == [64 * MIB, 32 * MIB, 8 * MIB]


def test_region_without_uuids_keeps_the_positional_mapping(tmp_path):
    require_native()
    c = Claim(tmp=tmp_path, gpus="2xT4").create(memory=16 * MIB)  # one device, no UUID
    out = multi(c, "1,0", f"0:{20 * MIB}", f"1:{20 * MIB}")
    assert out["rc"] == [2, 0] and out["total"] == [16 * MIB, T4_MEMORY]


def test_nvml_reports_each_gpus_own_claim_by_uuid(node):
    c, _, _ = node
    # NVML index 0 is GPU 0 (claim-a) whatever CUDA_VISIBLE_DEVICES says; CUDA ordinal 0 is GPU 1 here
    info = c.json("info", CUDA_VISIBLE_DEVICES="1,0,2")
    assert (info["total"], info["nvml_total"], info["nvml2_total"]) == (32 * MIB, 64 * MIB, 64 * MIB)


def test_a_corrupt_region_under_the_root_is_logged_and_skipped(node):
    c, regions, _ = node
    broken = regions["claim-a"].parent.parent / "claim-c" / "region"
    broken.parent.mkdir()
    broken.write_bytes(b"not a region")
    proc = c.run("multi", f"0:{48 * MIB}", f"1:{48 * MIB}", CUDA_VISIBLE_DEVICES="0,1")
    assert json.loads(proc.stdout)["rc"] == [0, 2]
    assert f"region {broken}: file size does not match" in proc.stderr
    assert proc.stderr.count("claim-c") == 1


def test_each_gpu_is_throttled_to_its_own_claims_share(node):
    c, regions, _ = node
    # ordinal 0 is GPU 1: claim-b's 60%, not the 30% that position 0 of CARVE_REGION (claim-a) would give
    env = {"CARVE_REGION": str(regions["claim-a"]), "CUDA_VISIBLE_DEVICES": "1,0", "CLIENT_ORDINAL": "0"}
    proc = c.run("launch", "3", "80", "1000000", **env)
    windows = json.loads(proc.stdout.strip().splitlines()[-1])["windows"][2:]
    assert windows and abs(sum(windows) / len(windows) - 60) <= 6, windows
    with Region.open(regions["claim-b"]) as b:
        assert b._struct.devices[0].target == 60


def test_regions_root_defaults_to_var_run_carve():
    # the plugin mounts each claim's region directory there (driver/plugin/container/edits.py)
    from driver.plugin.container.edits import REGION_CONTAINER_DIR

    header = (REPO / "native" / "src" / "limiter.h").read_text()
    assert f'#define CARVE_DEFAULT_REGION_DIR "{REGION_CONTAINER_DIR}"' in header
    assert os.path.isabs(REGION_CONTAINER_DIR)
