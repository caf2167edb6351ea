"""The Preparer in process, with MIG emulated by a dict: what prepared claims record and share. Two plugin
processes on one plugin directory (a rolling update) adopt each other's claims; two soft claims mount their
regions at different paths; a claim's checkpoint record names the pods it is reserved for."""

from __future__ import annotations

import pytest
from support.preparer_world import MIXED, preparer_world, put

from driver.plugin.state.recovery import recover


@pytest.fixture
def world(tmp_path, stub_cache):
    return preparer_world(tmp_path, stub_cache)


def test_two_processes_sharing_the_plugin_dir_never_lose_each_others_claims(world):
    # A rolling update: the old and the new plugin process both serve for a while, one at a time under the
    # node's file lock. Each must adopt what the other wrote to the checkpoint, not overwrite it.
    cluster, mig, make = world
    old, new = make(), make()
    recover(old)
    recover(new)
    first = put(cluster, "first", MIXED)
    second = put(cluster, "second", MIXED[1:])
    assert old.prepare([first])[first.uid].error == ""
    assert new.prepare([second])[second.uid].error == ""
    assert set(new.state) == {first.uid, second.uid}
    assert new.prepare([first])[first.uid].devices == old.prepare([first])[first.uid].devices
    assert mig.created == 1  # the new process found the claim prepared and did not prepare it again
    assert old.unprepare([second]) == {second.uid: ""}  # the old process knows the new one's claim
    assert set(new.specs.claim_uids()) == {first.uid}
    assert new.unprepare([first]) == {first.uid: ""}
    assert mig.live == {} and old.specs.claim_uids() == set()
    q = make()
    assert recover(q) == "ok" and q.state == {}


def test_two_soft_claims_mount_their_regions_at_different_paths(world):
    # Both claims may end up in one container: their region mounts must not land on the same path.
    cluster, _, make = world
    p = make()
    recover(p)
    refs = [put(cluster, n, MIXED[1:]) for n in ("a", "b")]
    assert all(r.error == "" for r in p.prepare(refs).values())
    regions = []
    for ref in refs:
        edits = p.specs.read(ref.uid)["containerEdits"]
        env = dict(e.split("=", 1) for e in edits["env"])
        mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
        region_dir = env["CARVE_REGION"].rpartition("/")[0]
        assert mounts[env["CARVE_REGION"]].endswith(f"/claims/{ref.uid}/region/region")
        assert mounts[f"{region_dir}/limits"].endswith(f"/claims/{ref.uid}/limits")
        regions.append(region_dir)
    assert len(set(regions)) == 2


def test_prepare_records_the_pods_the_claim_is_reserved_for(world):
    # the NVML cross-check gives a GPU process to a claim through these pods (its cgroup names its pod)
    cluster, _mig, make = world
    ref = put(cluster, "soft", MIXED[1:])
    pod = "00000001-0000-4000-8000-000000000001"
    stored = cluster.get_resource_claim("ns", "soft")
    stored["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": pod}]
    cluster.put_resource_claim(stored)
    preparer = make()
    recover(preparer)
    assert preparer.prepare([ref])[ref.uid].error == ""
    assert preparer.state[ref.uid].pods == [pod]
    assert make().checkpoint.load().claims[ref.uid].pods == [pod]
