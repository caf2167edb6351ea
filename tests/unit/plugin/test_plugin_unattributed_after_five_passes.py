"""A claim whose region reports processes NVML never shows is reported on the fifth pass in a row, as
docs/limiter.md, docs/metrics.md and docs/security.md promise ("5 passes in a row"): not on the fourth (a
process just started or just gone is not a finding), and then once."""

from __future__ import annotations

from support.cgroups import pod_uid, write_cgroup

from driver.cluster.local import LocalCluster
from driver.plugin.enforcement.crosscheck import ClaimView, GpuProcess
from driver.plugin.enforcement.enforcer import Enforcer

MIB = 1 << 20


def test_a_forged_region_is_reported_on_the_fifth_pass_in_a_row(tmp_path):
    write_cgroup(tmp_path, 66, None)  # a process of no pod on the claim's GPU
    procs = {"GPU-A": [GpuProcess(66, MIB)]}
    cluster = LocalCluster()
    enforcer = Enforcer("n", cluster, False, processes=lambda _g: procs, proc_root=tmp_path)
    forged = ClaimView("a", "team", "c", ("GPU-A",), (0,), pods=frozenset({pod_uid(1)}), reported_processes=2)
    passes = [enforcer.check([forged], {"a": ("team", "c")}).unattributed for _ in range(5)]
    assert passes == [[], [], [], [], ["a"]]
    assert [e["reason"] for e in cluster.events] == ["GpuProcessesUnattributed"]
