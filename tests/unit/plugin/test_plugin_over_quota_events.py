"""A claim whose processes NVML counts over its memory quota (the enforcer's over-quota finding): from the
second pass in a row that sees it, one Warning Event on the claim says how many bytes NVML counts, for which
processes and against which quota, and, only under --kill-unenforced, that they were killed; without the
option nothing is killed (report-only enforcement must never take a workload down)."""

from __future__ import annotations

from support.cgroups import pod_uid, write_cgroup

from driver.cluster.local import LocalCluster
from driver.plugin.enforcement.crosscheck import ClaimView, GpuProcess, allowed_bytes
from driver.plugin.enforcement.enforcer import REASON_OVER_QUOTA, Enforcer

MIB = 1 << 20
POD_A = pod_uid(1)
LIMIT = 100 * MIB


def _run(tmp_path, kill: bool, passes: int):
    write_cgroup(tmp_path, 10, POD_A)
    write_cgroup(tmp_path, 11, POD_A)
    used = allowed_bytes(LIMIT, 2, allowance=MIB)  # one byte past the margin with the second process's byte
    procs = {"GPU-A": [GpuProcess(10, used), GpuProcess(11, 1)]}
    claim = ClaimView("a", "team", "name-a", ("GPU-A",), (LIMIT,), frozenset(), pods=frozenset({POD_A}))
    cluster, killed = LocalCluster(), []
    enforcer = Enforcer(
        "node-1",
        cluster,
        kill,
        processes=lambda _g: procs,
        proc_root=tmp_path,
        allowance=MIB,
        killer=lambda pid, pods: killed.append((pid, set(pods))) or True,
    )
    found = [enforcer.check([claim], {"a": ("team", "name-a")}) for _ in range(passes)]
    return cluster, killed, found, used + 1


def test_the_first_pass_reports_nothing(tmp_path):
    cluster, killed, (found,), _ = _run(tmp_path, kill=True, passes=1)
    assert found.over_quota == [] and cluster.events == [] and killed == []


def test_report_only_sends_one_event_naming_bytes_processes_and_quota_and_kills_nothing(tmp_path):
    cluster, killed, found, used = _run(tmp_path, kill=False, passes=3)
    assert [len(f.over_quota) for f in found] == [0, 1, 1]
    assert killed == [] and found[-1].kills == 0
    (e,) = cluster.events
    assert (e["reason"], e["type"], e["involvedObject"]["name"]) == (REASON_OVER_QUOTA, "Warning", "name-a")
    assert e["message"] == (
        f"NVML counts {used} bytes on GPU GPU-A for processes [10, 11], over the claim's quota of "
        f"{LIMIT} bytes"
    )


def test_with_kill_unenforced_the_processes_are_killed_and_the_event_says_so(tmp_path):
    cluster, killed, found, _ = _run(tmp_path, kill=True, passes=2)
    assert killed == [(10, {POD_A}), (11, {POD_A})] and found[-1].kills == 2
    (e,) = cluster.events
    assert e["message"].endswith(f"over the claim's quota of {LIMIT} bytes; killed (--kill-unenforced)")


def test_two_claims_over_quota_are_both_reported_from_the_second_pass(tmp_path):
    pod_b = pod_uid(2)
    write_cgroup(tmp_path, 10, POD_A)
    write_cgroup(tmp_path, 20, pod_b)
    over = allowed_bytes(LIMIT, 1, allowance=MIB) + 1
    procs = {"GPU-A": [GpuProcess(10, over)], "GPU-B": [GpuProcess(20, over)]}
    claims = [
        ClaimView("a", "team", "name-a", ("GPU-A",), (LIMIT,), frozenset(), pods=frozenset({POD_A})),
        ClaimView("b", "team", "name-b", ("GPU-B",), (LIMIT,), frozenset(), pods=frozenset({pod_b})),
    ]
    cluster = LocalCluster()
    enforcer = Enforcer(
        "node-1", cluster, False, processes=lambda _g: procs, proc_root=tmp_path, allowance=MIB
    )
    refs = {"a": ("team", "name-a"), "b": ("team", "name-b")}
    enforcer.check(claims, refs)
    found = enforcer.check(claims, refs)
    assert sorted(o.claim_uid for o in found.over_quota) == ["a", "b"]
    assert sorted(e["involvedObject"]["name"] for e in cluster.events) == ["name-a", "name-b"]
