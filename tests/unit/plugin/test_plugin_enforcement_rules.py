"""The NVML cross-check rules (pure), whose a process is (its cgroup's pod, never its region), and how
findings are reported and acted on."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cgroups import cgroup_text, pod_uid, write_cgroup

from driver.cluster.local import LocalCluster
from driver.plugin.enforcement.attribution import (
    AttributionError,
    pidfd_kill,
    pod_uid_of_cgroup,
    pod_uid_of_path,
    reserved_pods,
)
from driver.plugin.enforcement.crosscheck import (
    CORE_MARGIN,
    CORE_WINDOW,
    ClaimView,
    CoreSample,
    GpuProcess,
    allowed_bytes,
    attribute,
    cross_check,
    over_share,
    unpermitted_excess,
)
from driver.plugin.enforcement.enforcer import UNATTRIBUTED_PASSES, Enforcer

MIB = 1 << 20
POD_A, POD_B, POD_X = pod_uid(1), pod_uid(2), pod_uid(99)


def view(uid: str, gpu: str, limit: int, *pids: int, pods: tuple[str, ...] = ()) -> ClaimView:
    return ClaimView(uid, "team", f"name-{uid}", (gpu,), (limit,), frozenset(pids), pods=frozenset(pods))


def test_only_processes_of_no_claim_of_their_gpu_are_unenforced():
    procs = {
        "GPU-A": [GpuProcess(10, MIB), GpuProcess(11, MIB), GpuProcess(99, 5 * MIB)],
        "GPU-Z": [GpuProcess(500, MIB)],  # a whole GPU of another claim: not ours to judge
    }
    found = cross_check([view("a", "GPU-A", 0, 10), view("b", "GPU-A", 0, 11)], procs, lambda pid: "b")
    assert [(u.gpu_uuid, u.pid, u.used_bytes, u.claim_uid) for u in found.unenforced] == [
        ("GPU-A", 99, 5 * MIB, "b")
    ]
    assert found.soft_gpus == ("GPU-A",)


def test_over_quota_needs_more_than_the_margin():
    limit = 100 * MIB
    at_margin = allowed_bytes(limit, 2, allowance=MIB)
    assert at_margin == limit + limit // 20 + 2 * MIB
    claims = [view("a", "GPU-A", limit, 1, 2)]
    within = {"GPU-A": [GpuProcess(1, at_margin - 10), GpuProcess(2, 10)]}
    assert cross_check(claims, within, allowance=MIB).over_quota == []
    over = {"GPU-A": [GpuProcess(1, at_margin), GpuProcess(2, 1)]}
    (o,) = cross_check(claims, over, allowance=MIB).over_quota
    assert (o.claim_uid, o.used_bytes, o.limit_bytes, o.pids) == ("a", at_margin + 1, limit, (1, 2))
    # no memory limit: never over quota
    assert cross_check([view("a", "GPU-A", 0, 1)], over, allowance=0).over_quota == []


def test_a_pod_with_two_claims_on_one_gpu_is_judged_against_both_quotas():
    procs = {"GPU-A": [GpuProcess(1, 30 * MIB)]}
    pod_of = {1: POD_A}
    claims = [view("a", "GPU-A", 20 * MIB, pods=(POD_A,)), view("b", "GPU-A", 20 * MIB, pods=(POD_A,))]
    assert cross_check(attribute(claims, procs, pod_of), procs, allowance=0).over_quota == []
    procs = {"GPU-A": [GpuProcess(1, 50 * MIB)]}
    (o,) = cross_check(attribute(claims, procs, pod_of), procs, allowance=0).over_quota
    assert (o.claim_uid, o.limit_bytes, o.pids, o.pods) == ("a", 40 * MIB, (1,), (POD_A,))


@pytest.mark.parametrize(
    "layout", ["systemd-v2", "systemd-v1", "guaranteed-v2", "cgroupfs-v2", "cgroupfs-v1"]
)
def test_the_pod_of_a_process_is_read_from_its_cgroup_in_every_kubelet_layout(layout):
    assert pod_uid_of_cgroup(cgroup_text(POD_A, layout)) == POD_A
    assert pod_uid_of_cgroup(cgroup_text(None, layout)) is None  # a host service


def test_a_cgroup_path_names_a_pod_only_under_kubepods():
    assert pod_uid_of_path(f"/../../kubepods.slice/kubepods-pod{POD_A.replace('-', '_')}.slice/x") == POD_A
    # a systemd unit anyone could name pod<uid> is not a pod
    assert pod_uid_of_path(f"/system.slice/pod{POD_A}.slice/x") is None
    with pytest.raises(AttributionError):  # hierarchies naming two pods: neither
        pod_uid_of_cgroup(f"1:memory:/kubepods/pod{POD_A}/c\n2:cpu:/kubepods/pod{POD_B}/c\n")


def test_reserved_pods_are_the_pods_of_status_reserved_for():
    claim = {
        "status": {
            "reservedFor": [
                {"resource": "pods", "name": "p", "uid": POD_A},
                {"resource": "pods", "name": "q", "uid": POD_B.upper()},
                {"apiGroup": "example.com", "resource": "pods", "name": "r", "uid": POD_X},
                {"resource": "pods", "name": "bad", "uid": "../../x"},
                "junk",
            ]
        }
    }
    assert reserved_pods(claim) == tuple(sorted((POD_A, POD_B)))
    assert reserved_pods({"status": {"reservedFor": "x"}}) == () and reserved_pods({}) == ()


def test_attribution_takes_pods_from_cgroups_never_from_what_a_claim_says_its_pids_are():
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(20, MIB), GpuProcess(30, MIB)]}
    pod_of = {10: POD_A, 20: POD_B, 30: None}
    # claim a arrives claiming pid 20 (another claim's): attribution replaces what it said
    claims = [view("a", "GPU-A", 0, 20, pods=(POD_A,)), view("b", "GPU-A", 0, pods=(POD_B,))]
    a, b = attribute(claims, procs, pod_of)
    assert (a.pids, b.pids) == (frozenset({10}), frozenset({20}))


def test_findings_are_reported_once_and_killed_only_with_the_option(tmp_path: Path):
    write_cgroup(tmp_path, 10, POD_A)
    write_cgroup(tmp_path, 66, POD_X)  # a pod holding claim x, on another GPU
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(66, MIB)], "GPU-B": []}
    claims = [view("a", "GPU-A", 0, pods=(POD_A,)), view("x", "GPU-B", 0, pods=(POD_X,))]
    refs = {"a": ("team", "name-a"), "x": ("team", "name-x")}
    for kill in (False, True):
        cluster, killed = LocalCluster(), []
        enforcer = Enforcer(
            "node-1",
            cluster,
            kill,
            processes=lambda _g: procs,
            proc_root=tmp_path,
            killer=lambda pid, pods, killed=killed: killed.append((pid, set(pods))),
        )
        for _ in range(3):
            enforcer.check(claims, refs)
        assert killed == ([(66, {POD_X})] * 2 if kill else [])  # from the second pass that sees it
        assert enforcer.findings.kills == (2 if kill else 0)
        # the Event names the claim of the process's pod, once however many passes see it
        (e,) = cluster.events
        assert (e["reason"], e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"]) == (
            "UnenforcedGpuProcess",
            "Warning",
            "ResourceClaim",
            "name-x",
        )
        assert "66" in e["message"] and POD_X in e["message"]


def test_a_process_of_no_claims_pod_is_reported_never_killed(tmp_path):
    write_cgroup(tmp_path, 66, None)  # the host's own, or a pod carve does not know
    procs = {"GPU-A": [GpuProcess(66, MIB)]}
    killed: list[int] = []
    enforcer = Enforcer(
        "n", None, True, processes=lambda _g: procs, proc_root=tmp_path, killer=lambda p, _: killed.append(p)
    )
    for _ in range(3):
        found = enforcer.check([view("a", "GPU-A", 0, pods=(POD_A,))], {})
    assert [u.pid for u in found.unenforced] == [66] and killed == []


def test_an_event_that_cannot_be_sent_does_not_stop_the_check(tmp_path):
    class Down:
        def create_event(self, namespace, body):
            raise ConnectionError("api server away")

    write_cgroup(tmp_path, 66, POD_X)
    procs = {"GPU-A": [GpuProcess(66, MIB)]}
    claims = [view("a", "GPU-A", 0, pods=(POD_A,)), view("x", "GPU-B", 0, pods=(POD_X,))]
    refs = {"a": ("team", "name-a"), "x": ("team", "name-x")}
    enforcer = Enforcer("n", Down(), False, processes=lambda _g: procs, proc_root=tmp_path)
    enforcer.check(claims, refs)
    found = enforcer.check(claims, refs)
    assert [u.pid for u in found.unenforced] == [66]


def test_a_finding_counts_only_from_its_second_pass_in_a_row(tmp_path):
    # a pod that just joined a shared claim: its process shows in NVML before the plugin reads reservedFor
    write_cgroup(tmp_path, 10, POD_A)
    write_cgroup(tmp_path, 66, POD_B)
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(66, MIB)]}
    killed: list[int] = []
    enforcer = Enforcer(
        "n", None, True, processes=lambda _g: procs, proc_root=tmp_path, killer=lambda p, _: killed.append(p)
    )
    assert enforcer.check([view("a", "GPU-A", 0, pods=(POD_A,))], {}).unenforced == []
    assert enforcer.unknown_pods == {POD_B: {"GPU-A"}}  # the watcher reads the claims' reservedFor again
    both = view("a", "GPU-A", 0, pods=(POD_A, POD_B))
    assert enforcer.check([both], {}).unenforced == [] and killed == []
    assert enforcer.unknown_pods == {}


def test_a_claim_whose_region_reports_processes_nvml_never_shows_is_reported_after_a_bound(tmp_path):
    write_cgroup(tmp_path, 66, None)
    procs = {"GPU-A": [GpuProcess(66, MIB)]}
    cluster = LocalCluster()
    enforcer = Enforcer("n", cluster, False, processes=lambda _g: procs, proc_root=tmp_path)
    forged = ClaimView("a", "team", "name-a", ("GPU-A",), (0,), pods=frozenset({POD_A}), reported_processes=3)
    for _ in range(UNATTRIBUTED_PASSES - 1):
        found = enforcer.check([forged], {"a": ("team", "name-a")})
        assert found.unattributed == []
    # the GPU is never shielded meanwhile: the process of no claim is found from the second pass
    assert [u.pid for u in found.unenforced] == [66]
    found = enforcer.check([forged], {"a": ("team", "name-a")})
    assert found.unattributed == ["a"] and [u.pid for u in found.unenforced] == [66]
    # pid 66 is no claim's: no Event for it; the claim is told about its region, once
    enforcer.check([forged], {"a": ("team", "name-a")})
    assert [e["reason"] for e in cluster.events] == ["GpuProcessesUnattributed"]


def test_a_kill_rechecks_the_cgroup_and_spares_a_process_of_another_pod(tmp_path):
    import subprocess

    victim = subprocess.Popen(["sleep", "30"])
    try:
        write_cgroup(tmp_path, victim.pid, POD_B)
        with pytest.raises(PermissionError, match="not one of the claim's pods"):
            pidfd_kill(victim.pid, {POD_A}, tmp_path)
        assert victim.poll() is None
        pidfd_kill(victim.pid, {POD_B}, tmp_path)
        assert victim.wait(timeout=10) == -9
        with pytest.raises(ProcessLookupError):
            pidfd_kill(victim.pid, {POD_B}, tmp_path)  # reaped: nothing to signal
    finally:
        victim.kill()
        victim.wait()


# --- compute: SM utilization against the effective share --------------------------------------------------


def busy(used: int, others: int = 0) -> CoreSample:
    return CoreSample(used, others, (10,))


def test_sustained_use_over_the_share_next_to_a_busy_neighbour_is_reported():
    # a 30% claim at 80% while its neighbour works: the `default` policy does not let it burst
    samples = [busy(80, others=20)] * CORE_WINDOW
    assert over_share(samples, 30, "default") == 80
    assert over_share(samples, 30, "force") == 80


def test_a_default_claim_bursting_on_an_idle_gpu_is_not_reported():
    # nobody else busy (below the limiter's 5% threshold): bursting is what `default` allows
    assert over_share([busy(100, others=0)] * 10, 30, "default") is None
    assert over_share([busy(100, others=4)] * 10, 30, "default") is None
    # one pass where the neighbour was idle breaks the window: the limiter let it go then
    mixed = [busy(90, 50), busy(90, 50), busy(90, 0), busy(90, 50), busy(90, 50)]
    assert over_share(mixed, 30, "default") is None
    assert over_share([*mixed, busy(90, 50)], 30, "default") == 90  # three unpermitted passes in a row now


def test_force_over_its_share_is_reported_even_on_an_idle_gpu():
    assert over_share([busy(70)] * CORE_WINDOW, 30, "force") == 70


def test_a_short_spike_is_not_reported():
    spike = [busy(30, 50), busy(100, 50), busy(30, 50)]
    assert over_share(spike, 30, "force") is None
    assert over_share([busy(100, 50)] * (CORE_WINDOW - 1), 30, "force") is None  # window not full yet


def test_within_the_margin_disable_and_no_share_are_never_over():
    assert unpermitted_excess(busy(30 + CORE_MARGIN, 50), 30, "force") == 0  # the limiter's overshoot
    assert unpermitted_excess(busy(31 + CORE_MARGIN, 50), 30, "force") == 1 + CORE_MARGIN
    assert over_share([busy(100, 50)] * 5, 30, "disable") is None  # the class allowed it to run free
    assert over_share([busy(100, 50)] * 5, 0, "force") is None  # no compute limit on this GPU


def cores_view(uid: str, gpu: str, share: int, policy: str, *pids: int) -> ClaimView:
    """A claim whose pod is pod_uid(<its first pid>), holding `pids` (pure tests give pids directly; the
    Enforcer finds them again from the fake proc root's cgroups, written by `cgroups_of`)."""
    pods = frozenset({pod_uid(pids[0])}) if pids else frozenset()
    return ClaimView(uid, "team", f"name-{uid}", (gpu,), (0,), frozenset(pids), (share,), policy, pods)


def cgroups_of(proc: Path, *claims: ClaimView) -> Path:
    for c in claims:
        for pid in c.pids:
            write_cgroup(proc, pid, pod_uid(min(c.pids)))
    return proc


def test_cross_check_sums_a_claims_processes_against_everyone_elses():
    util = {"GPU-A": {10: 30, 11: 25, 20: 40, 99: 5}, "GPU-B": {}}
    claims = [
        cores_view("a", "GPU-A", 30, "default", 10, 11),
        cores_view("b", "GPU-A", 60, "force", 20),
        cores_view("c", "GPU-B", 50, "force", 30),
        cores_view("free", "GPU-A", 0, "default", 40),  # no compute limit: not sampled
    ]
    found = cross_check(claims, {"GPU-A": [], "GPU-B": []}, utilization=util)
    assert found.core_samples == {
        ("a", "GPU-A"): CoreSample(55, 45, (10, 11)),
        ("b", "GPU-A"): CoreSample(40, 60, (20,)),
        ("c", "GPU-B"): CoreSample(0, 0, ()),  # NVML had no sample: idle
    }
    assert cross_check(claims, {"GPU-A": []}).core_samples == {}  # utilization not asked


def test_the_enforcer_reports_over_share_once_and_kills_only_with_the_option(tmp_path):
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(20, MIB)]}
    util = {"GPU-A": {10: 85, 20: 15}}  # claim a (30%, default) runs 85% while b is busy
    claims = [cores_view("a", "GPU-A", 30, "default", 10), cores_view("b", "GPU-A", 60, "default", 20)]
    cgroups_of(tmp_path, *claims)
    refs = {"a": ("team", "name-a"), "b": ("team", "name-b")}
    for kill in (False, True):
        cluster, killed, since = LocalCluster(), [], []

        def sampler(gpus, since_us, since=since):
            since.append(since_us)
            return util

        clock = iter(range(1_000, 100_000, 1_000))
        enforcer = Enforcer(
            "node-1",
            cluster,
            kill,
            processes=lambda _g: procs,
            proc_root=tmp_path,
            killer=lambda pid, pods, killed=killed: killed.append((pid, set(pods))),
            utilization=sampler,
            clock_us=lambda clock=clock: next(clock),
        )
        for _ in range(CORE_WINDOW - 1):
            assert enforcer.check(claims, refs).over_share == []
        (o,) = enforcer.check(claims, refs).over_share
        assert (o.claim_uid, o.gpu_uuid, o.used_percent, o.share_percent, o.pids) == (
            "a",
            "GPU-A",
            85,
            30,
            (10,),
        )
        assert since == [0, 1_000, 2_000]  # each pass asks NVML for the samples since the last one
        if kill:
            assert killed == [(10, {pod_uid(10)})] and enforcer.findings.kills == 1
        else:
            enforcer.check(claims, refs)
            assert killed == [] and enforcer.findings.over_share  # still over, reported once
        (e,) = cluster.events
        assert (e["reason"], e["involvedObject"]["name"]) == ("GpuComputeOverShare", "name-a")
        assert "85%" in e["message"] and "30%" in e["message"]


def test_a_share_change_restarts_the_window(tmp_path):
    util = {"GPU-A": {10: 70, 20: 20}}
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(20, MIB)]}
    enforcer = Enforcer(
        "n", None, False, processes=lambda _g: procs, proc_root=tmp_path, utilization=lambda _g, _s: util
    )
    other = cores_view("b", "GPU-A", 20, "default", 20)
    cgroups_of(tmp_path, cores_view("a", "GPU-A", 80, "force", 10), other)
    enforcer.check([cores_view("a", "GPU-A", 80, "force", 10), other], {})
    enforcer.check([cores_view("a", "GPU-A", 80, "force", 10), other], {})
    # the plugin lowered a's effective share (a reservation arrived): earlier samples do not count against it
    for _ in range(CORE_WINDOW - 1):
        assert enforcer.check([cores_view("a", "GPU-A", 40, "force", 10), other], {}).over_share == []
    assert enforcer.check([cores_view("a", "GPU-A", 40, "force", 10), other], {}).over_share


def test_the_default_margin_is_the_documented_5_percent_and_512_mib_per_process():
    # docs/limiter.md: "quota + 5% + 512 MiB per process" (a CUDA context NVML counts, the limiter does not)
    gib = 1 << 30
    assert allowed_bytes(8 * gib, 3) == 8 * gib + 8 * gib // 20 + 3 * 512 * (1 << 20)
    assert allowed_bytes(8 * gib, 0) == 8 * gib + 8 * gib // 20
