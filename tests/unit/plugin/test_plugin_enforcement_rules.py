"""The NVML cross-check rules (pure), who a process belongs to, and how findings are reported and acted on."""

from __future__ import annotations

from pathlib import Path

from driver.cluster.local import LocalCluster
from driver.plugin.enforcement.crosscheck import (
    CORE_MARGIN,
    CORE_WINDOW,
    ClaimView,
    CoreSample,
    GpuProcess,
    allowed_bytes,
    cross_check,
    over_share,
    unpermitted_excess,
)
from driver.plugin.enforcement.enforcer import Enforcer, claim_of_process

MIB = 1 << 20


def view(uid: str, gpu: str, limit: int, *pids: int) -> ClaimView:
    return ClaimView(uid, "team", f"name-{uid}", (gpu,), (limit,), frozenset(pids))


def test_only_processes_no_region_knows_on_soft_sliced_gpus_are_unenforced():
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


def test_the_claim_of_a_process_is_read_from_its_environment(tmp_path):
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "environ").write_bytes(b"PATH=/bin\0CARVE_REGION=/var/run/carve/uid-7/region\0")
    (proc / "8").mkdir()
    (proc / "8" / "environ").write_bytes(b"PATH=/bin\0")
    assert claim_of_process(7, proc) == "uid-7"
    assert claim_of_process(8, proc) is None
    assert claim_of_process(9, proc) is None  # gone


def test_findings_are_reported_once_and_killed_only_with_the_option(tmp_path: Path):
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(66, MIB)]}
    claims = [view("a", "GPU-A", 0, 10)]
    refs = {"a": ("team", "name-a")}
    for kill in (False, True):  # no environ under tmp_path: the claim is unknown, so no Event
        cluster, killed = LocalCluster(), []
        enforcer = Enforcer(
            "node-1", cluster, kill, processes=lambda _g: procs, proc_root=tmp_path, killer=killed.append
        )
        for _ in range(3):
            enforcer.check(claims, refs)
        assert killed == ([66, 66] if kill else [])  # from the second pass that sees it
        assert enforcer.findings.kills == (2 if kill else 0)
        assert cluster.events == []
    # with an owner the Event names the claim, once however many passes see it
    (tmp_path / "66").mkdir()
    (tmp_path / "66" / "environ").write_bytes(b"CARVE_REGION=/var/run/carve/a/region\0")
    cluster = LocalCluster()
    enforcer = Enforcer("node-1", cluster, False, processes=lambda _g: procs, proc_root=tmp_path)
    for _ in range(3):
        enforcer.check(claims, refs)
    (e,) = cluster.events
    assert (e["reason"], e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"]) == (
        "UnenforcedGpuProcess",
        "Warning",
        "ResourceClaim",
        "name-a",
    )
    assert e["metadata"]["namespace"] == "team" and "66" in e["message"]


def test_an_event_that_cannot_be_sent_does_not_stop_the_check(tmp_path):
    class Down:
        def create_event(self, namespace, body):
            raise ConnectionError("api server away")

    (tmp_path / "66").mkdir()
    (tmp_path / "66" / "environ").write_bytes(b"CARVE_REGION=/var/run/carve/a/region\0")
    procs = {"GPU-A": [GpuProcess(66, MIB)]}
    enforcer = Enforcer("n", Down(), False, processes=lambda _g: procs, proc_root=tmp_path)
    enforcer.check([view("a", "GPU-A", 0)], {"a": ("team", "name-a")})
    found = enforcer.check([view("a", "GPU-A", 0)], {"a": ("team", "name-a")})
    assert [u.pid for u in found.unenforced] == [66]


def test_a_finding_counts_only_from_its_second_pass_in_a_row(tmp_path):
    # NVML lists a process as soon as it has a CUDA context, a moment before its limiter takes a region slot
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(66, MIB)]}
    killed: list[int] = []
    enforcer = Enforcer("n", None, True, processes=lambda _g: procs, proc_root=tmp_path, killer=killed.append)
    assert enforcer.check([view("a", "GPU-A", 0, 10)], {}).unenforced == [] and killed == []
    # registered by the second pass: never reported, never killed
    assert enforcer.check([view("a", "GPU-A", 0, 10, 66)], {}).unenforced == [] and killed == []
    assert enforcer.check([view("a", "GPU-A", 0, 10)], {}).unenforced == []  # seen again: a first pass
    assert [u.pid for u in enforcer.check([view("a", "GPU-A", 0, 10)], {}).unenforced] == [66]
    assert killed == [66]


def test_a_gpu_with_a_process_whose_host_pid_is_unknown_is_not_judged():
    procs = {"GPU-A": [GpuProcess(4242, MIB)], "GPU-B": [GpuProcess(77, MIB)]}
    pending = ClaimView("a", "team", "a", ("GPU-A",), (0,), frozenset(), unresolved=True)
    found = cross_check([pending, view("b", "GPU-B", 0)], procs)
    assert [(u.gpu_uuid, u.pid) for u in found.unenforced] == [("GPU-B", 77)]


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
    return ClaimView(uid, "team", f"name-{uid}", (gpu,), (0,), frozenset(pids), False, (share,), policy)


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


def test_the_enforcer_reports_over_share_once_and_kills_only_with_the_option():
    procs = {"GPU-A": [GpuProcess(10, MIB), GpuProcess(20, MIB)]}
    util = {"GPU-A": {10: 85, 20: 15}}  # claim a (30%, default) runs 85% while b is busy
    claims = [cores_view("a", "GPU-A", 30, "default", 10), cores_view("b", "GPU-A", 60, "default", 20)]
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
            killer=killed.append,
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
            assert killed == [10] and enforcer.findings.kills == 1
        else:
            enforcer.check(claims, refs)
            assert killed == [] and enforcer.findings.over_share  # still over, reported once
        (e,) = cluster.events
        assert (e["reason"], e["involvedObject"]["name"]) == ("GpuComputeOverShare", "name-a")
        assert "85%" in e["message"] and "30%" in e["message"]


def test_a_share_change_restarts_the_window():
    util = {"GPU-A": {10: 70, 20: 20}}
    enforcer = Enforcer("n", None, False, processes=lambda _g: {}, utilization=lambda _g, _s: util)
    other = cores_view("b", "GPU-A", 20, "default", 20)
    enforcer.check([cores_view("a", "GPU-A", 80, "force", 10), other], {})
    enforcer.check([cores_view("a", "GPU-A", 80, "force", 10), other], {})
    # the plugin lowered a's effective share (a reservation arrived): earlier samples do not count against it
    for _ in range(CORE_WINDOW - 1):
        assert enforcer.check([cores_view("a", "GPU-A", 40, "force", 10), other], {}).over_share == []
    assert enforcer.check([cores_view("a", "GPU-A", 40, "force", 10), other], {}).over_share
