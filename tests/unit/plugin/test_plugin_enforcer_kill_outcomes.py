"""What --kill-unenforced counts and logs when a kill does not go through (enforcement/enforcer.py):
a process that exited before the signal is no kill and no error; a kill refused (its cgroup now names
another pod, EPERM) is logged as kill-failed with why, and not counted; only kills that went through count
in the findings (the carve_plugin_enforcement_kills metric). A pass with no claim on any GPU keeps the count
of earlier kills and reports nothing."""

from __future__ import annotations

import errno
import logging

import pytest
from support.cgroups import pod_uid, write_cgroup

from driver.cluster.local import LocalCluster
from driver.plugin.enforcement.crosscheck import ClaimView, GpuProcess, allowed_bytes
from driver.plugin.enforcement.enforcer import Enforcer

MIB = 1 << 20
LIMIT = 100 * MIB


def _enforcer(tmp_path, killer):
    pod = pod_uid(1)
    for pid in (10, 11, 12):
        write_cgroup(tmp_path, pid, pod)
    over = allowed_bytes(LIMIT, 3, allowance=MIB)
    procs = {"GPU-A": [GpuProcess(10, over), GpuProcess(11, 1), GpuProcess(12, 1)]}
    claim = ClaimView("a", "team", "name-a", ("GPU-A",), (LIMIT,), frozenset(), pods=frozenset({pod}))
    enforcer = Enforcer(
        "node-1", LocalCluster(), True, processes=lambda _g: procs, proc_root=tmp_path, allowance=MIB,
        killer=killer, utilization=None,
    )  # fmt: skip
    return enforcer, claim


def test_only_kills_that_went_through_count_and_a_refused_one_is_logged(tmp_path, caplog):
    def killer(pid, pods):
        if pid == 11:
            raise ProcessLookupError(errno.ESRCH, "exited")
        if pid == 12:
            raise PermissionError(errno.EPERM, "not killed: pid 12 is in pod x, not one of the claim's pods")

    enforcer, claim = _enforcer(tmp_path, killer)
    refs = {"a": ("team", "name-a")}
    with caplog.at_level(logging.INFO):
        enforcer.check([claim], refs)
        found = enforcer.check([claim], refs)
    assert found.kills == 1 and enforcer.findings.kills == 1
    records = [
        (r.getMessage(), r.fields) for r in caplog.records if r.getMessage().startswith("enforcement.kill")
    ]
    assert records == [
        ("enforcement.killed", {"pid": 10, "why": "over-quota", "gpu": "GPU-A"}),
        (
            "enforcement.kill-failed",
            {
                "pid": 12,
                "why": "over-quota",
                "gpu": "GPU-A",
                "error": "not killed: pid 12 is in pod x, not one of the claim's pods",
            },
        ),
    ]


def test_a_pass_with_no_claim_on_a_gpu_keeps_the_kill_count_and_reports_nothing(tmp_path):
    enforcer, claim = _enforcer(tmp_path, lambda pid, pods: None)
    enforcer.check([claim], {})
    assert enforcer.check([claim], {}).kills == 3
    quiet = enforcer.check([], {})
    assert quiet.kills == 3 and quiet.over_quota == [] and quiet.unenforced == []
    gpu_less = ClaimView("b", "team", "name-b", ("",), (LIMIT,), frozenset())
    assert enforcer.check([gpu_less], {}).kills == 3


@pytest.mark.parametrize("exc", [ProcessLookupError(errno.ESRCH, "gone"), PermissionError(errno.EPERM, "no")])
def test_a_kill_that_did_not_go_through_is_not_counted(tmp_path, exc):
    def killer(pid, pods):
        raise exc

    enforcer, claim = _enforcer(tmp_path, killer)
    enforcer.check([claim], {})
    assert enforcer.check([claim], {}).kills == 0
