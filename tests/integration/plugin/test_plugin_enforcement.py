"""The NVML cross-check on the fake GPU: a process whose pod holds no claim of the GPU is found (Event on its
pod's claim, metric), and killed with --kill-unenforced; a claim whose processes NVML counts over its quota
is reported, whether they loaded the limiter or not; a claim whose processes NVML shows above its compute
share is reported where its core policy does not permit it (`force`; `default` next to a busy neighbour) and
not while it bursts on an idle GPU under `default`. Whose a process is comes from its cgroup (a fake
--proc-root holds a cgroup file per test process, in the kubelet's layout) and the claim's pods, never from
the claim's region: a forged slot neither hides a process nor gets another claim's process counted or killed.

The region watcher runs in a child process that loads the fake NVML (as `--gpus fake:1xT4` does) and shares
the fake GPU's state with the test clients: one under the limiter (it registers in the claim's region), one
started without it (a static binary or a musl image would look the same to NVML).
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from support.cgroups import pod_uid, write_cgroup

REPO = Path(__file__).resolve().parents[3]
POD, OTHER_POD, STRANGER = pod_uid(1), pod_uid(2), pod_uid(3)  # the claim's pod, another claim's, no claim's
ELSEWHERE = "GPU-00000000-0000-4000-8000-000000000000"  # a GPU of another node's NVML: not checked here
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

claims_dir, uuid, quota, kill = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[5] == "kill"
proc_root, claims = Path(sys.argv[4]).parent, json.loads(Path(sys.argv[4]).read_text())
nvml.load("fake:1xT4", "enforcement-test")
state = {}
for uid, c in claims.items():  # every claim: {"pods": [...], "quota": bytes, "gpu": its GPU if not ours}
    files = ClaimFiles(claims_dir / uid)
    gpu = c.get("gpu", uuid)
    limits = ClaimLimits((DeviceLimit(c["quota"], 30, uuid=gpu),), f"/var/run/carve/{uid}/region")
    write_limits(files.limits, limits)
    state[uid] = ClaimRecord(uid, "team", uid.removesuffix("-uid"), STATE_COMPLETED,
                             [DeviceRecord(["s"], "p", "gpu-0", "x", [], names.TYPE_VGPU, gpu)], c["pods"])
cluster = LocalCluster()
enforcer = Enforcer("node-a", cluster, kill, allowance=0, proc_root=proc_root)
watcher = RegionWatcher(lambda: state, claims_dir, proc_root=proc_root, enforcer=enforcer)
watcher.tick()
first = enforcer.findings
assert not (first.unenforced or first.over_quota or first.kills or cluster.events), first
watcher.tick()  # a finding counts from its second pass in a row
f = enforcer.findings
print(json.dumps({
    "unenforced": [[u.pid, u.used_bytes, u.claim_uid] for u in f.unenforced],
    "unattributed": f.unattributed,
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
share, policy, kill = int(sys.argv[4]), sys.argv[5], sys.argv[9] == "kill"
mine, neighbour = int(sys.argv[6]), int(sys.argv[7])  # SM percent of the claim's process, of the neighbour
nvml.load("fake:1xT4", "enforcement-test")
lib = ctypes.CDLL(str(Path(os.environ["CARVE_FAKE_LIB_DIR"]) / "libnvidia-ml.so.1"))
lib.fake_kernel_submit.restype = ctypes.c_uint64
lib.fake_kernel_submit.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
files = ClaimFiles(claims_dir / "claim-uid")
device = DeviceLimit(8 << 20, share, uuid=uuid)
write_limits(files.limits, ClaimLimits((device,), "/var/run/carve/claim-uid/region", core_policy=policy))
proc_root = Path(sys.argv[8]).parent
record = ClaimRecord("claim-uid", "team", "soft", STATE_COMPLETED,
                     [DeviceRecord(["s"], "p", "gpu-0", "x", [], names.TYPE_VGPU, uuid)],
                     json.loads(Path(sys.argv[8]).read_text())["claim-uid"]["pods"])
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
enforcer = Enforcer("node-a", cluster, kill, allowance=0, proc_root=proc_root)
watcher = RegionWatcher(lambda: {"claim-uid": record}, claims_dir, proc_root=proc_root, enforcer=enforcer)
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
    proc_root = tmp_path / "proc"  # the node's /proc as the plugin reads it: a cgroup file per process
    proc_root.mkdir()
    claims = {"claim-uid": {"pods": [POD], "quota": 0}}
    region = claims_dir / "claim-uid" / "region" / "region"
    region.parent.mkdir(parents=True)
    from driver.limits import ClaimLimits, DeviceLimit, create_region

    create_region(region, ClaimLimits((DeviceLimit(8 * MIB, 30, uuid=uuid),), str(region)))
    holders: list[subprocess.Popen] = []

    def hold(nbytes: int, limited: bool, pod: str | None = POD) -> subprocess.Popen:
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
        write_cgroup(proc_root, p.pid, pod)  # the kubelet put it in its pod's cgroup
        return p

    def run_watcher(script: str, *argv: str, kill: bool) -> dict:
        (proc_root / "claims.json").write_text(json.dumps(claims))
        argv = (*argv, str(proc_root / "claims.json"), "kill" if kill else "report")
        out = subprocess.run(
            [sys.executable, "-c", script, str(claims_dir), uuid, *argv],
            env={**env, "PYTHONPATH": str(REPO), "CARVE_FAKE_LIB_DIR": str(BUILD / "fakes")},
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    def watch(quota: int, kill: bool = False) -> dict:
        claims["claim-uid"]["quota"] = quota
        return run_watcher(WATCHER, str(quota), kill=kill)

    def watch_compute(
        pid: int, share: int, policy: str, mine: int, neighbour: int, kill: bool = False
    ) -> dict:
        argv = (str(pid), str(share), policy, str(mine), str(neighbour))
        return run_watcher(COMPUTE_WATCHER, *argv, kill=kill)

    hold.compute = watch_compute
    hold.claims = claims
    hold.region = region
    yield hold, watch
    for p in holders:
        p.kill()
        p.wait()


def test_a_process_of_no_claim_of_the_gpu_is_reported_on_its_pods_claim(gpu):
    hold, watch = gpu
    hold.claims["other-uid"] = {"pods": [OTHER_POD], "quota": 0, "gpu": ELSEWHERE}  # its pod's claim
    limited = hold(4 * MIB, limited=True)
    rogue = hold(64 * MIB, limited=False, pod=OTHER_POD)
    found = watch(quota=8 * MIB)
    assert found["unenforced"] == [[rogue.pid, 64 * MIB, "other-uid"]]
    assert found["events"] == [["UnenforcedGpuProcess", "other", "team"]]
    assert found["over_quota"] == [] and found["kills"] == 0
    assert limited.poll() is None and rogue.poll() is None  # reported, not killed, without the option


def test_with_kill_unenforced_the_process_is_killed(gpu):
    hold, watch = gpu
    hold.claims["other-uid"] = {"pods": [OTHER_POD], "quota": 0, "gpu": ELSEWHERE}
    limited = hold(4 * MIB, limited=True)
    rogue = hold(64 * MIB, limited=False, pod=OTHER_POD)
    found = watch(quota=8 * MIB, kill=True)
    assert found["kills"] == 1
    assert rogue.wait(timeout=10) == -9 and limited.poll() is None


def test_a_process_of_no_claims_pod_is_reported_and_never_killed(gpu):
    hold, watch = gpu
    stranger = hold(64 * MIB, limited=False, pod=None)  # the host's, or a pod carve knows nothing of
    found = watch(quota=8 * MIB, kill=True)
    assert found["unenforced"] == [[stranger.pid, 64 * MIB, None]] and found["kills"] == 0
    assert stranger.poll() is None


def test_a_claim_that_nvml_counts_over_its_quota_is_reported_on_the_claim(gpu):
    hold, watch = gpu
    limited = hold(6 * MIB, limited=True)  # within the region's own count, but the plugin's quota is 4 MiB
    found = watch(quota=4 * MIB)
    assert found["over_quota"] == [["claim-uid", 6 * MIB, 4 * MIB, [limited.pid]]]
    assert found["events"] == [["GpuMemoryOverQuota", "claim", "team"]]
    assert found["unenforced"] == []


def test_report_only_enforcement_never_kills_a_claim_over_its_quota(gpu):
    # Without --kill-unenforced the admin asked for Events only: a claim NVML counts over its quota, with a
    # process that loaded the limiter and one that did not, is reported and keeps every process.
    hold, watch = gpu
    limited = hold(4 * MIB, limited=True)
    static = hold(64 * MIB, limited=False)
    found = watch(quota=8 * MIB)
    assert found["over_quota"] == [["claim-uid", 68 * MIB, 8 * MIB, sorted([limited.pid, static.pid])]]
    assert found["events"] == [["GpuMemoryOverQuota", "claim", "team"]]
    assert found["kills"] == 0
    assert limited.poll() is None and static.poll() is None


def test_a_process_of_the_claims_pod_without_the_limiter_counts_against_its_quota(gpu):
    hold, watch = gpu
    limited = hold(4 * MIB, limited=True)
    static = hold(64 * MIB, limited=False)  # a static binary in the claim's own pod
    found = watch(quota=8 * MIB, kill=True)
    assert found["over_quota"] == [["claim-uid", 68 * MIB, 8 * MIB, sorted([limited.pid, static.pid])]]
    assert found["unenforced"] == [] and found["kills"] == 2
    assert static.wait(timeout=10) == -9


def test_nothing_is_reported_while_every_process_is_its_claims_and_within_quota(gpu):
    hold, watch = gpu
    hold(4 * MIB, limited=True)
    found = watch(quota=8 * MIB)
    assert found == {"unenforced": [], "unattributed": [], "over_quota": [], "kills": 0, "events": []}


def forge_slot(region: Path, slot: int, pid: int, host_pid: int, pid_ns: int) -> None:
    """What a root process in the claim's container can write into its own region: any slot, any values."""
    from driver.limits.region import ProcStruct, RegionStruct

    offset = RegionStruct.procs.offset + slot * ctypes.sizeof(ProcStruct)
    with open(region, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<iiQQ", pid, host_pid, 1, pid_ns))


def test_a_forged_region_slot_does_not_hide_a_process_from_the_check(gpu):
    # today's main: a slot with a foreign pid namespace and no host pid kept the claim "unresolved" forever,
    # and its GPU was never checked for processes of no claim
    hold, watch = gpu
    # (no limited process runs: it would reclaim a slot whose owner holds no lock on it)
    forge_slot(hold.region, 500, pid=7, host_pid=0, pid_ns=0xDEAD)
    stranger = hold(64 * MIB, limited=False, pod=STRANGER)
    found = watch(quota=8 * MIB)
    assert found["unenforced"] == [[stranger.pid, 64 * MIB, None]]


def test_a_slot_naming_another_claims_process_neither_counts_nor_kills_it(gpu):
    # today's main: claim-uid's region named the victim's host pid, so NVML's count of the victim's memory
    # went to claim-uid, over its quota, and --kill-unenforced killed the victim
    hold, watch = gpu
    hold.claims["victim-uid"] = {"pods": [OTHER_POD], "quota": 1 << 30}
    victim = hold(64 * MIB, limited=False, pod=OTHER_POD)
    forge_slot(hold.region, 500, pid=victim.pid, host_pid=victim.pid, pid_ns=0)
    found = watch(quota=8 * MIB, kill=True)
    assert found["over_quota"] == [] and found["kills"] == 0
    assert victim.poll() is None


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
