"""The NVML cross-check rules (pure), who a process belongs to, and how findings are reported and acted on."""

from __future__ import annotations

from pathlib import Path

from driver.cluster.local import LocalCluster
from driver.plugin.enforcement import (
    ClaimView,
    Enforcer,
    GpuProcess,
    allowed_bytes,
    claim_of_process,
    cross_check,
)

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
