"""The NVML cross-check on the fake GPU: a process that uses a soft-sliced GPU without the limiter is found
(Event on its claim, metric), and killed with --kill-unenforced; a claim whose processes NVML counts over its
quota is reported; processes the claim's region knows are left alone.

The region watcher runs in a child process that loads the fake NVML (as `--gpus fake:1xT4` does) and shares
the fake GPU's state with the test clients: one under the limiter (it registers in the claim's region), one
started without it (a static binary or a musl image would look the same to NVML).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "native" / "build"
CLIENT = BUILD / "tests" / "limiter_client_cuda_nvml"
MIB = 1 << 20

WATCHER = """
import json, sys
from pathlib import Path
from driver import names
from driver.cluster.local import LocalCluster
from driver.gpu import nvml
from driver.limits import ClaimLimits, DeviceLimit, write_limits
from driver.plugin.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord
from driver.plugin.edits import ClaimFiles
from driver.plugin.enforcement import Enforcer
from driver.plugin.regions import RegionWatcher

claims_dir, uuid, quota, kill = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "kill"
nvml.load("fake:1xT4", "enforcement-test")
files = ClaimFiles(claims_dir / "claim-uid")
limits = ClaimLimits((DeviceLimit(quota, 30, uuid=uuid),), "/var/run/carve/claim-uid/region")
write_limits(files.limits, limits)
record = ClaimRecord("claim-uid", "team", "soft", STATE_COMPLETED,
                     [DeviceRecord(["s"], "p", "gpu-0", "x", [], names.TYPE_VGPU, uuid)])
cluster = LocalCluster()
enforcer = Enforcer("node-a", cluster, kill, allowance=0)
watcher = RegionWatcher(lambda: {"claim-uid": record}, claims_dir, enforcer=enforcer)
watcher.tick()
first = enforcer.findings
assert not (first.unenforced or first.over_quota or first.kills or cluster.events), first
watcher.tick()  # a finding counts from its second pass in a row
f = enforcer.findings
print(json.dumps({
    "unenforced": [[u.pid, u.used_bytes, u.claim_uid] for u in f.unenforced],
    "over_quota": [[o.claim_uid, o.used_bytes, o.limit_bytes, list(o.pids)] for o in f.over_quota],
    "kills": f.kills,
    "events": [[e["reason"], e["involvedObject"]["name"], e["metadata"]["namespace"]]
               for e in cluster.events],
}))
"""


@pytest.fixture
def gpu(tmp_path):
    for needed in (CLIENT, BUILD / "libcarve-limiter.so", BUILD / "fakes" / "libnvidia-ml.so.1"):
        if not needed.exists():
            pytest.fail(f"native build missing ({needed}): run `make native`")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CARVE_", "LD_PRELOAD"))}
    env.update(
        CARVE_FAKE_GPUS="1xT4",
        CARVE_FAKE_SEED="enforcement-test",
        CARVE_FAKE_STATE=str(tmp_path / "fake.state"),
        LD_LIBRARY_PATH=str(BUILD / "fakes"),
        CARVE_LOG="error",
    )
    uuid = json.loads(subprocess.run([str(CLIENT), "uuids"], env=env, capture_output=True, text=True).stdout)[
        0
    ]
    claims_dir = tmp_path / "claims"
    region = claims_dir / "claim-uid" / "region" / "region"
    region.parent.mkdir(parents=True)
    from driver.limits import ClaimLimits, DeviceLimit, create_region

    create_region(region, ClaimLimits((DeviceLimit(8 * MIB, 30, uuid=uuid),), str(region)))
    holders: list[subprocess.Popen] = []

    def hold(nbytes: int, limited: bool) -> subprocess.Popen:
        # both run in the claim's container (its CARVE_REGION); only one loaded the limiter
        extra = {"CARVE_REGION": "/var/run/carve/claim-uid/region"}
        if limited:
            extra = {"LD_PRELOAD": str(BUILD / "libcarve-limiter.so"), "CARVE_REGION": str(region)}
        extra["CARVE_REGION_DIR"] = str(tmp_path / "none")
        p = subprocess.Popen(
            [str(CLIENT), "hold", str(nbytes)], env={**env, **extra}, stdout=subprocess.PIPE, text=True
        )
        holders.append(p)
        assert p.stdout.readline().startswith("ready 0")
        return p

    def watch(quota: int, kill: bool = False) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", WATCHER, str(claims_dir), uuid, str(quota), "kill" if kill else "report"],
            env={**env, "PYTHONPATH": str(REPO), "CARVE_FAKE_LIB_DIR": str(BUILD / "fakes")},
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    yield hold, watch
    for p in holders:
        p.kill()
        p.wait()


def test_a_process_without_the_limiter_is_reported_on_its_claim(gpu):
    hold, watch = gpu
    limited = hold(4 * MIB, limited=True)
    rogue = hold(64 * MIB, limited=False)
    found = watch(quota=8 * MIB)
    assert found["unenforced"] == [[rogue.pid, 64 * MIB, "claim-uid"]]  # the limited one is in the region
    assert found["events"] == [["UnenforcedGpuProcess", "soft", "team"]]
    assert found["over_quota"] == [] and found["kills"] == 0
    assert limited.poll() is None and rogue.poll() is None  # reported, not killed, without the option


def test_with_kill_unenforced_the_process_is_killed(gpu):
    hold, watch = gpu
    limited = hold(4 * MIB, limited=True)
    rogue = hold(64 * MIB, limited=False)
    found = watch(quota=8 * MIB, kill=True)
    assert found["kills"] == 1
    assert rogue.wait(timeout=10) == -9 and limited.poll() is None


def test_a_claim_that_nvml_counts_over_its_quota_is_reported_on_the_claim(gpu):
    hold, watch = gpu
    limited = hold(6 * MIB, limited=True)  # within the region's own count, but the plugin's quota is 4 MiB
    found = watch(quota=4 * MIB)
    assert found["over_quota"] == [["claim-uid", 6 * MIB, 4 * MIB, [limited.pid]]]
    assert found["events"] == [["GpuMemoryOverQuota", "soft", "team"]]
    assert found["unenforced"] == []


def test_nothing_is_reported_while_every_process_is_known_and_within_quota(gpu):
    hold, watch = gpu
    hold(4 * MIB, limited=True)
    found = watch(quota=8 * MIB)
    assert found == {"unenforced": [], "over_quota": [], "kills": 0, "events": []}
