"""The region watcher reads a prepared claim's reservedFor again to find pods that joined it after prepare,
but only from the claim it prepared: a claim deleted and recreated under the same name (another UID,
whichever way it sorts) lends none of its pods, so a process of such a pod stays another pod's and is
reported as unenforced from the cross-check's second pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cgroups import pod_uid, write_cgroup

from driver import names
from driver.cluster.local import LocalCluster
from driver.limits import ClaimLimits, DeviceLimit, create_region, write_limits
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.enforcement.crosscheck import GpuProcess
from driver.plugin.enforcement.enforcer import Enforcer
from driver.plugin.enforcement.regions import RegionWatcher
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord

GIB = 1 << 30
UID = "m-claim-uid"


def _prepared(root: Path) -> dict[str, ClaimRecord]:
    files = ClaimFiles(root / "claims" / UID)
    limits = ClaimLimits(devices=(DeviceLimit(GIB, 30, uuid="GPU-A"),), region_path="/r", priority="high")
    write_limits(files.limits, limits)
    files.region.parent.mkdir(parents=True)
    create_region(files.region, limits)
    record = ClaimRecord(
        UID,
        "ns",
        "shared",
        STATE_COMPLETED,
        [DeviceRecord(["r"], "p", "gpu-0", None, [], names.TYPE_VGPU, "GPU-A")],
    )
    record.pods = [pod_uid(1)]
    return {UID: record}


@pytest.mark.parametrize("stored_uid", [UID, "a-recreated", "z-recreated"])
def test_only_the_prepared_claims_reserved_for_lends_its_pods(tmp_path, stored_uid):
    state = _prepared(tmp_path)
    proc = tmp_path / "proc"
    write_cgroup(proc, 10, pod_uid(1))
    write_cgroup(proc, 20, pod_uid(2))  # the pod that joined later
    cluster = LocalCluster()
    reserved = [{"resource": "pods", "name": n, "uid": u} for n, u in (("a", pod_uid(1)), ("b", pod_uid(2)))]
    cluster.put_resource_claim(
        {
            "metadata": {"name": "shared", "namespace": "ns", "uid": stored_uid},
            "status": {"reservedFor": reserved},
        }
    )
    procs = {"GPU-A": [GpuProcess(10, 1 << 20), GpuProcess(20, 1 << 20)]}
    enforcer = Enforcer("n", None, False, processes=lambda _g: procs, proc_root=proc, utilization=None)
    watcher = RegionWatcher(
        lambda: state, tmp_path / "claims", proc_root=proc, enforcer=enforcer, claims=cluster
    )
    watcher.tick()
    watcher.tick()
    unenforced = [u.pid for u in enforcer.findings.unenforced]
    assert unenforced == ([] if stored_uid == UID else [20])
