"""The Preparer in process, with MIG emulated by a dict: which MIG instances a claim may use and destroy.
carve uses and destroys only the instances it created for that claim (the journal's record, its UUID), never
one made by hand, replaced, of another profile or held by another prepared claim; the whole GPU of a MIG GPU
is prepared with MIG mode off, and refused while instances are on it."""

from __future__ import annotations

import pytest
from support.preparer_world import GI, MIXED, preparer_world, put

from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.state.recovery import recover


@pytest.fixture
def world(tmp_path, stub_cache):
    return preparer_world(tmp_path, stub_cache)


def test_an_instance_carve_did_not_record_is_an_error_not_adopted(world):
    cluster, mig, make = world
    p = make()
    recover(p)
    foreign = mig.create("GPU-0", "1g.10gb", 6)  # e.g. made by hand with nvidia-smi
    ref = put(cluster, "a", MIXED)
    error = p.prepare([ref])[ref.uid].error
    assert "carve did not create" in error and foreign.uuid in error and "gpu-0-mig-1g10gb-6" in error
    assert p.state == {} and p.specs.claim_uids() == set()
    assert mig.live == {("GPU-0", 6): foreign}  # neither used nor destroyed by the rollback
    assert recover(make()) == "ok" and mig.live == {("GPU-0", 6): foreign}  # nor by a restart


def test_two_mig_claims_on_one_gpu_are_unprepared_separately(world):
    cluster, mig, make = world
    p = make()
    recover(p)
    first = put(cluster, "first", [{"request": "m", "device": "gpu-0-mig-1g10gb-6"}])
    second = put(cluster, "second", [{"request": "m", "device": "gpu-0-mig-1g10gb-5"}])
    assert {r.error for r in p.prepare([first, second]).values()} == {""}
    kept = mig.live[("GPU-0", 5)]
    assert p.unprepare([first]) == {first.uid: ""}
    assert mig.live == {("GPU-0", 5): kept}  # the first claim's instance is gone, the second's untouched
    assert p.unprepare([second]) == {second.uid: ""}
    assert mig.live == {} and p.migs.journal.entries() == []


def test_unprepare_leaves_an_instance_of_another_profile_at_the_claims_placement(world):
    # Someone replaced the claim's 1g.10gb at start 6 with a 1g.20gb: not the claim's, not ours to destroy.
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[:1])
    assert p.prepare([ref])[ref.uid].error == ""
    foreign = MigInstance("MIG-foreign", 15, "1g.20gb", MigPlacement(6, 2), 9, 0, 20 * GI, 26)
    mig.live[("GPU-0", 6)] = foreign
    assert p.unprepare([ref]) == {ref.uid: ""}
    assert mig.live == {("GPU-0", 6): foreign}


def test_an_instance_another_prepared_claim_holds_is_never_shared(world):
    cluster, mig, make = world
    p = make()
    recover(p)
    first, second = put(cluster, "first", MIXED[:1]), put(cluster, "second", MIXED[:1])
    assert p.prepare([first])[first.uid].error == ""
    error = p.prepare([second])[second.uid].error
    assert f"held by claim {first.uid}" in error and mig.created == 1
    assert p.unprepare([first]) == {first.uid: ""} and mig.live == {}
    assert p.prepare([second])[second.uid].error == ""  # the kubelet's retry, once the first is gone
    assert p.unprepare([second]) == {second.uid: ""} and mig.live == {}


def test_unprepare_leaves_an_instance_that_replaced_the_claims_own(world):
    # The claim's instance was destroyed by hand and someone made a new one, same profile and placement:
    # its UUID is not the recorded one, so it is not carve's to destroy.
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[:1])
    assert p.prepare([ref])[ref.uid].error == ""
    mig.live.clear()
    replacement = mig.create("GPU-0", "1g.10gb", 6)
    assert p.unprepare([ref]) == {ref.uid: ""}
    assert mig.live == {("GPU-0", 6): replacement} and p.migs.journal.entries() == []


def test_the_whole_gpu_of_a_mig_gpu_is_prepared_with_mig_mode_off(world):
    # CUDA cannot use a whole GPU in MIG mode: /dev/nvidia0 alone would give the container nothing usable.
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "whole", [{"request": "g", "device": "gpu-0"}])
    assert p.prepare([ref])[ref.uid].error == ""
    assert mig.mig_mode["GPU-0"] is False and mig.mode_calls == [("GPU-0", False)]


def test_the_whole_gpu_is_refused_while_mig_instances_are_on_it(world):
    cluster, mig, make = world
    p = make()
    recover(p)
    foreign = mig.create("GPU-0", "1g.10gb", 6)
    ref = put(cluster, "whole", [{"request": "g", "device": "gpu-0"}])
    error = p.prepare([ref])[ref.uid].error
    assert "needs the whole GPU" in error and foreign.uuid in error
    assert mig.mig_mode["GPU-0"] is True and mig.mode_calls == [] and p.state == {}
