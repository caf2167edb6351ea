"""The NVML cross-check on the fake GPU: a process that uses a soft-sliced GPU without the limiter is found
(Event on its claim, metric), and killed with --kill-unenforced; a claim whose processes NVML counts over its
quota is reported; a claim whose processes NVML shows above its compute share is reported where its core
policy does not permit it (`force`; `default` next to a busy neighbour) and not while it bursts on an idle
GPU under `default`; processes the claim's region knows are left alone.

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
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.enforcement.enforcer import Enforcer
from driver.plugin.enforcement.regions import RegionWatcher

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

# The compute check through the same code path: the claim's limits file gives it a share and a core policy;
# the fake GPU's kernel timeline (fake_kernel_submit, the lowest layer: what NVML's per-process utilization
# reports) is fed for the limited process's pid, as if it launched through a path the limiter does not see,
# and for a neighbour pid. The region watcher ticks once a second (the fake's utilization window).
COMPUTE_WATCHER = """
import ctypes, json, os, sys, threading, time
from pathlib import Path
from driver import names
from driver.cluster.local import LocalCluster
from driver.gpu import nvml
from driver.limits import ClaimLimits, DeviceLimit, write_limits
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.enforcement.crosscheck import CORE_WINDOW
from driver.plugin.enforcement.enforcer import Enforcer
from driver.plugin.enforcement.regions import RegionWatcher

claims_dir, uuid, pid = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
share, policy, kill = int(sys.argv[4]), sys.argv[5], sys.argv[8] == "kill"
mine, neighbour = int(sys.argv[6]), int(sys.argv[7])  # SM percent of the claim's process, of the neighbour
nvml.load("fake:1xT4", "enforcement-test")
lib = ctypes.CDLL(str(Path(os.environ["CARVE_FAKE_LIB_DIR"]) / "libnvidia-ml.so.1"))
lib.fake_kernel_submit.restype = ctypes.c_uint64
lib.fake_kernel_submit.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
files = ClaimFiles(claims_dir / "claim-uid")
device = DeviceLimit(8 << 20, share, uuid=uuid)
write_limits(files.limits, ClaimLimits((device,), "/var/run/carve/claim-uid/region", core_policy=policy))
record = ClaimRecord("claim-uid", "team", "soft", STATE_COMPLETED,
                     [DeviceRecord(["s"], "p", "gpu-0", "x", [], names.TYPE_VGPU, uuid)])
stop = threading.Event()

def burn():  # every 50 ms: one kernel of the claim's process, one of the neighbour's, each its percent long
    period = 50_000_000
    while not stop.is_set():
        for who, pct in ((pid, mine), (os.getpid(), neighbour)):
            if pct:
                lib.fake_kernel_submit(0, who, 1, period * pct // 100)
        time.sleep(period / 1e9)

threading.Thread(target=burn, daemon=True).start()
cluster = LocalCluster()
enforcer = Enforcer("node-a", cluster, kill, allowance=0)
watcher = RegionWatcher(lambda: {"claim-uid": record}, claims_dir, enforcer=enforcer)
samples, over = [], []
for _ in range(CORE_WINDOW + 1):
    time.sleep(1.0)
    watcher.tick()
    samples += [[s.used, s.others] for s in enforcer.findings.core_samples.values()]
    over += [[o.claim_uid, o.share_percent, o.policy, list(o.pids)] for o in enforcer.findings.over_share]
stop.set()
f = enforcer.findings
print(json.dumps({
    "over_share": over,  # every pass's findings: the window fills at pass CORE_WINDOW, then once more
    "samples": samples,
    "kills": f.kills,
    "events": [[e["reason"], e["involvedObject"]["name"]] for e in cluster.events],
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

    def run_watcher(script: str, *argv: str, kill: bool) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", script, str(claims_dir), uuid, *argv, "kill" if kill else "report"],
            env={**env, "PYTHONPATH": str(REPO), "CARVE_FAKE_LIB_DIR": str(BUILD / "fakes")},
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    def watch(quota: int, kill: bool = False) -> dict:
        return run_watcher(WATCHER, str(quota), kill=kill)

    def watch_compute(
        pid: int, share: int, policy: str, mine: int, neighbour: int, kill: bool = False
    ) -> dict:
        argv = (str(pid), str(share), policy, str(mine), str(neighbour))
        return run_watcher(COMPUTE_WATCHER, *argv, kill=kill)

    hold.compute = watch_compute
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


def test_a_claim_over_its_share_next_to_a_busy_neighbour_is_reported_on_the_claim(gpu):
    hold, _ = gpu
    limited = hold(4 * MIB, limited=True)
    found = hold.compute(limited.pid, share=30, policy="default", mine=75, neighbour=20)
    # what NVML reported each pass: the claim's process near 75%, the neighbour near 20%
    assert all(60 <= used <= 90 and others >= 10 for used, others in found["samples"][1:]), found
    # found at the third pass and the fourth (still over), reported once
    assert found["over_share"] == [["claim-uid", 30, "default", [limited.pid]]] * 2
    assert found["events"] == [["GpuComputeOverShare", "soft"]]
    assert found["kills"] == 0 and limited.poll() is None


def test_a_default_claim_bursting_on_an_idle_gpu_is_left_alone(gpu):
    hold, _ = gpu
    limited = hold(4 * MIB, limited=True)
    found = hold.compute(limited.pid, share=30, policy="default", mine=75, neighbour=0)
    assert all(60 <= used <= 90 and others == 0 for used, others in found["samples"][1:]), found
    assert found["over_share"] == [] and found["events"] == []


def test_a_force_claim_over_its_share_is_killed_with_the_option(gpu):
    hold, _ = gpu
    limited = hold(4 * MIB, limited=True)
    found = hold.compute(limited.pid, share=30, policy="force", mine=75, neighbour=0, kill=True)
    # found at the third pass and killed: the fourth finds nothing left
    assert found["over_share"] == [["claim-uid", 30, "force", [limited.pid]]]
    assert found["events"] == [["GpuComputeOverShare", "soft"]]
    assert found["kills"] == 1 and limited.wait(timeout=10) == -9
