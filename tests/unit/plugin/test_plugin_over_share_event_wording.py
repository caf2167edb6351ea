"""The GpuComputeOverShare Event a claim's owner reads: it says why the claim was held to its share, and the
reason depends on the claim's core policy. Under `force` the share is a hard cap; under `default` a claim may
burst while its neighbours are idle, so the Event must say that other processes were busy (docs/limiter.md).
A message that blamed `force` for a `default` claim sends its owner to change a setting it never made."""

from __future__ import annotations

import pytest
from support.cgroups import pod_uid, write_cgroup

from driver.cluster.local import LocalCluster
from driver.plugin.enforcement.crosscheck import CORE_WINDOW, ClaimView, GpuProcess
from driver.plugin.enforcement.enforcer import REASON_OVER_SHARE, Enforcer

MIB = 1 << 20


def _over_share_event(tmp_path, policy: str, kill: bool) -> dict:
    # claim a (30%) runs 85% of the SMs while claim b's process keeps 15% busy: over its share either way
    for pid in (10, 20):
        write_cgroup(tmp_path, pid, pod_uid(pid))
    claims = [
        ClaimView(
            "a", "team", "name-a", ("GPU-A",), (0,), frozenset({10}), (30,), policy, frozenset({pod_uid(10)})
        ),
        ClaimView(
            "b",
            "team",
            "name-b",
            ("GPU-A",),
            (0,),
            frozenset({20}),
            (60,),
            "default",
            frozenset({pod_uid(20)}),
        ),
    ]
    cluster = LocalCluster()
    enforcer = Enforcer(
        "node-1",
        cluster,
        kill,
        processes=lambda _g: {"GPU-A": [GpuProcess(10, MIB), GpuProcess(20, MIB)]},
        proc_root=tmp_path,
        killer=lambda _pid, _pods: True,
        utilization=lambda _g, _s: {"GPU-A": {10: 85, 20: 15}},
    )
    for _ in range(CORE_WINDOW):
        enforcer.check(claims, {"a": ("team", "name-a"), "b": ("team", "name-b")})
    (e,) = cluster.events
    assert (e["reason"], e["type"], e["involvedObject"]["name"]) == (REASON_OVER_SHARE, "Warning", "name-a")
    return e


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        ("force", "the core policy is force"),
        ("default", "other processes were busy on the GPU, so its core policy did not let it burst"),
    ],
)
def test_the_event_gives_the_reason_of_the_claims_own_core_policy(tmp_path, policy, why):
    e = _over_share_event(tmp_path, policy, kill=False)
    assert e["message"] == (
        f"NVML shows processes [10] using 85% of GPU GPU-A's SMs over the last {CORE_WINDOW} checks, "
        f"over the claim's compute share of 30% ({why})"
    )


def test_under_kill_unenforced_the_event_says_the_processes_were_killed(tmp_path):
    e = _over_share_event(tmp_path, "default", kill=True)
    assert e["message"].endswith("did not let it burst); killed (--kill-unenforced)")
