"""Memory quota across processes: concurrent allocation never overshoots, dead processes give their usage
back, and a missing, corrupt or foreign region never takes the application down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from driver.limits import Region

MIB = 1 << 20


def _wait_for(directory: Path, prefix: str, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list(directory.glob(f"{prefix}-*"))) < count:
        assert time.monotonic() < deadline, f"only {len(list(directory.glob(prefix + '-*')))} racers {prefix}"
        time.sleep(0.005)


def test_eight_processes_racing_never_exceed_the_quota(claim, tmp_path):
    c = claim().create(memory=64 * MIB)
    gate = tmp_path / "barrier"
    gate.mkdir()
    procs = [c.popen("race", "1000", str(MIB), str(64 * MIB), CLIENT_BARRIER=str(gate)) for _ in range(8)]
    # all eight allocate at once, and hold what they got until all have finished
    _wait_for(gate, "ready", 8)
    (gate / "go").touch()
    _wait_for(gate, "finished", 8)
    (gate / "done").touch()
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, f"a racer saw the driver exceed the quota: {out}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["ok"] + r["refused"] for r in results) == 8000
    assert sum(r["refused"] for r in results) > 0, "the race never reached the quota: the test proves nothing"
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 0
        assert r.peak_bytes(0) <= 64 * MIB
        assert r.processes() == []


def test_usage_of_a_killed_process_returns_to_the_pool(claim):
    c = claim().create(memory=64 * MIB)
    victim = c.popen("hold", str(48 * MIB))
    assert victim.stdout.readline().strip() == "ready 0"
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 48 * MIB
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # 32 MiB only fit once the dead process's 48 MiB are reclaimed (on the allocation slow path)
    assert c.run("alloc", str(32 * MIB)).stdout.strip() == "0"
    with Region.open(c.region) as r:
        assert r.used_bytes(0) == 0  # the survivor exited too, releasing its own usage
        assert all(p.pid != victim.pid for p in r.processes())


def test_a_live_process_keeps_its_usage(claim):
    c = claim().create(memory=64 * MIB)
    holder = c.popen("hold", str(48 * MIB))
    try:
        assert holder.stdout.readline().strip() == "ready 0"
        assert c.run("alloc", str(32 * MIB)).stdout.strip() == "2"  # OUT_OF_MEMORY: nothing to reclaim
    finally:
        holder.kill()
        holder.wait()


def test_region_limits_win_over_the_environment(claim):
    c = claim().create(memory=8 * MIB)
    # unsetting or raising the env limit inside the container does not lift the plugin's quota
    assert c.run("alloc", str(9 * MIB)).stdout.strip() == "2"
    assert c.run("alloc", str(9 * MIB), CARVE_MEMORY_LIMIT=str(1 << 40)).stdout.strip() == "2"


def test_environment_creates_a_missing_region_shared_by_the_claim(claim):
    c = claim()  # no region file: the first limiter creates it from its environment
    env = {"CARVE_MEMORY_LIMIT": str(8 * MIB)}
    holder = c.popen("hold", str(6 * MIB), **env)
    try:
        assert holder.stdout.readline().strip() == "ready 0"
        assert c.run("alloc", str(6 * MIB), **env).stdout.strip() == "2"
        with Region.open(c.region) as r:
            assert r.memory_limit(0) == 8 * MIB and r.used_bytes(0) == 6 * MIB
    finally:
        holder.kill()
        holder.wait()


def _alloc_with_bad_region(c, content: bytes, **env: str) -> subprocess.CompletedProcess:
    c.region.write_bytes(content)
    before = c.region.read_bytes()
    proc = c.run("alloc", str(9 * MIB), **{"CARVE_MEMORY_LIMIT": str(8 * MIB), **env})
    assert c.region.read_bytes() == before, "the limiter wrote into a region it does not understand"
    return proc


def test_corrupt_region_falls_back_to_per_process_limits(claim):
    c = claim()
    proc = _alloc_with_bad_region(c, os.urandom(166008))
    assert proc.stdout.strip() == "2"  # the env's 8 MiB still holds
    assert "bad magic" in proc.stderr and "enforced per process" in proc.stderr


def test_foreign_version_region_is_never_written_and_the_limits_file_still_holds(claim):
    c = claim().create(memory=8 * MIB)
    data = bytearray(c.region.read_bytes())
    data[8:12] = (9).to_bytes(4, "little")  # a future layout version
    proc = _alloc_with_bad_region(c, bytes(data), CARVE_MEMORY_LIMIT="1T")
    assert proc.stdout.strip() == "2"  # closed: not the environment's terabyte, nor per-process quotas
    assert "foreign layout version" in proc.stderr and "is unusable" in proc.stderr


def test_truncated_region_is_rejected_and_the_limits_file_still_holds(claim):
    c = claim().create(memory=8 * MIB)
    proc = _alloc_with_bad_region(c, c.region.read_bytes()[:4096], CARVE_MEMORY_LIMIT="1T")
    assert proc.stdout.strip() == "2" and "file size" in proc.stderr


def test_unreachable_region_directory_is_logged_not_fatal(claim):
    c = claim()
    env = {"CARVE_REGION": "/nonexistent/dir/region", "CARVE_MEMORY_LIMIT": str(8 * MIB)}
    proc = c.run("alloc", str(9 * MIB), **env)
    assert proc.stdout.strip() == "2" and "cannot open or create" in proc.stderr
    assert c.run("alloc", str(7 * MIB), **env).stdout.strip() == "0"


def test_hami_variables_are_honoured_when_carve_ones_are_absent(claim):
    c = claim()
    hami = {
        "CARVE_REGION": "",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(c.region),
        "CUDA_DEVICE_MEMORY_LIMIT_0": "8m",
    }
    assert c.run("alloc", str(9 * MIB), **hami).stdout.strip() == "2"
    assert c.run("alloc", str(7 * MIB), **hami).stdout.strip() == "0"
    with Region.open(c.region) as r:
        assert r.memory_limit(0) == 8 * MIB
    # policies live in the region too: a fresh claim created with HAMi's OOM killer on
    k = claim("killer")
    hami["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(k.region)
    killed = k.run("alloc", str(9 * MIB), check=False, ACTIVE_OOM_KILLER="true", **hami)
    assert killed.returncode == -9
