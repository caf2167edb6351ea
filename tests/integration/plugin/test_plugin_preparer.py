"""The Preparer in process, with MIG emulated by a dict: MIG reuse, rollback on failure, recovery paths."""

from __future__ import annotations

import pytest
from support.driverroot import LAYOUTS, build_driver_root, hook_dir, write_proc_root

from driver import names
from driver.cluster import LocalCluster
from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import HostLayout
from driver.plugin.state.checkpoint import (
    STATE_COMPLETED,
    STATE_STARTED,
    Checkpoint,
    ClaimRecord,
    DeviceRecord,
    MigRecord,
)
from driver.plugin.state.recovery import recover

GI = 1024**3
CATALOG = {
    "gpu-0-mig-1g10gb-6": NodeDevice(
        "gpu-0-mig-1g10gb-6",
        names.TYPE_MIG,
        "GPU-0",
        0,
        {"memory": 10 * GI},
        profile="1g.10gb",
        placement_start=6,
    ),
    "gpu-0-mig-1g10gb-5": NodeDevice(
        "gpu-0-mig-1g10gb-5",
        names.TYPE_MIG,
        "GPU-0",
        0,
        {"memory": 10 * GI},
        profile="1g.10gb",
        placement_start=5,
    ),
    "gpu-0": NodeDevice("gpu-0", names.TYPE_GPU, "GPU-0", 0, {"memory": 80 * GI}, mig_capable=True),
    "gpu-1": NodeDevice("gpu-1", names.TYPE_VGPU, "GPU-1", 1, {"memory": 80 * GI, "cores": 100}),
}


class DictMig:
    def __init__(self, fail: bool = False):
        self.live: dict[tuple[str, int], MigInstance] = {}
        self.fail = fail
        self.next_gi = 1
        self.created = 0
        self.mig_mode = {"GPU-0": True}
        self.mode_calls: list[tuple[str, bool]] = []

    def create(self, gpu_uuid, profile, start):
        # As NvmlMig.create (reuse=False): an instance already at the placement is an error.
        if self.fail:
            raise RuntimeError("NVML_ERROR_INSUFFICIENT_RESOURCES")
        key = (gpu_uuid, start)
        if key in self.live:
            raise RuntimeError(f"MigPlacementError: an instance is already at {start}")
        self.created += 1
        self.live[key] = MigInstance(
            f"MIG-{gpu_uuid}-{start}-{self.next_gi}",
            19,
            profile,
            MigPlacement(start, 1),
            self.next_gi,
            0,
            10 * GI,
            14,
        )
        self.next_gi += 1
        return self.live[key]

    def destroy(self, gpu_uuid, gi, ci, uuid):
        # As destroy_mig_instance with a uuid: refuses an instance whose UUID is not the recorded one.
        (key,) = [k for k, v in self.live.items() if k[0] == gpu_uuid and v.gpu_instance_id == gi]
        if self.live[key].uuid != uuid or self.live[key].compute_instance_id != ci:
            raise RuntimeError(f"MigOwnershipError: gi {gi} is {self.live[key].uuid}, not {uuid}")
        del self.live[key]

    def instances(self, gpu_uuid):
        return [v for k, v in self.live.items() if k[0] == gpu_uuid]

    def set_mig_mode(self, gpu_uuid, enabled):
        # As NVML: MIG cannot go off over live GPU instances; the change then stays pending.
        self.mode_calls.append((gpu_uuid, enabled))
        if not enabled and self.instances(gpu_uuid):
            return True, False
        self.mig_mode[gpu_uuid] = enabled
        return enabled, None


@pytest.fixture
def world(tmp_path, stub_cache):
    cluster = LocalCluster()
    mig = DictMig()
    limiter = hook_dir(tmp_path / "lib")  # with carve-cdi-hook and carve-ldconfig, as on a node
    (limiter / names.LIMITER_LIBRARY).touch()
    driver = build_driver_root(tmp_path / "root", LAYOUTS["rhel"], stub_cache)
    # The capability files of the GPU instances DictMig hands out (gi 1.., ci 0) on GPU minor 0.
    proc = write_proc_root(
        tmp_path / "proc", {(0, gi, ci): (3 + gi * 9 + (0 if ci is None else 1), 292) for gi in range(1, 9)
                            for ci in (None, 0)}
    )  # fmt: skip

    def make(boot="b1", mig_ops=None):
        return Preparer(
            PreparerSettings("node-a", tmp_path / "plugin", tmp_path / "cdi", limiter),
            cluster,
            HostLayout.scan(driver, proc, hook_dir=limiter),
            mig_ops or mig,
            lambda: CATALOG,
            Checkpoint(tmp_path / "checkpoint.json", boot),
        )

    return cluster, mig, make


def put(cluster, name, results):
    obj = cluster.put_resource_claim(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"driver": names.DRIVER_NAME, "pool": "node-a", **r} for r in results]
                    }
                }
            },
        }
    )
    return ClaimRef("ns", name, obj["metadata"]["uid"])


MIXED = [
    {"request": "m", "device": "gpu-0-mig-1g10gb-6"},
    {
        "request": "s",
        "device": "gpu-1",
        "shareID": "0b0e0a0d-1111-4222-8333-444455556666",
        "consumedCapacity": {"memory": "2Gi", "cores": "10"},
    },
]


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


def test_a_prepared_claim_whose_spec_vanished_is_prepared_again_with_its_instance(world):
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED)
    before = p.prepare([ref])[ref.uid]
    instance = mig.live[("GPU-0", 6)]
    p.specs.path(ref.uid).unlink()  # e.g. /var/run/cdi emptied by hand
    again = p.prepare([ref])[ref.uid]
    assert again.error == "" and again.devices == before.devices
    assert p.specs.path(ref.uid).exists()
    assert mig.live == {("GPU-0", 6): instance} and mig.created == 1  # kept, not recreated
    assert p.unprepare([ref]) == {ref.uid: ""} and mig.live == {}


def test_an_instance_from_a_prepare_that_crashed_is_destroyed_despite_a_corrupt_checkpoint(world, tmp_path):
    # A crash after the MIG instance was created, then the checkpoint is lost: no CDI spec names the claim,
    # only the MIG journal does, and that is enough to destroy the instance at the next start.
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[:1])
    p.migs.journal.intend(ref.uid, "GPU-0", "1g.10gb", 6)
    p.migs.journal.created(ref.uid, "GPU-0", mig.create("GPU-0", "1g.10gb", 6))
    (tmp_path / "checkpoint.json").write_text("{garbage")
    q = make()
    assert recover(q) == "corrupt"
    assert mig.live == {} and q.migs.journal.entries() == [] and q.state == {}
    assert q.prepare([ref])[ref.uid].error == "" and len(mig.live) == 1


def test_a_creating_record_names_the_instance_at_its_placement(world):
    # The crash came between NVML's create and the journal's update: the entry has no ids yet.
    _, mig, make = world
    p = make()
    recover(p)
    p.migs.journal.intend("gone-claim", "GPU-0", "1g.10gb", 6)
    mig.create("GPU-0", "1g.10gb", 6)
    foreign = mig.create("GPU-0", "1g.10gb", 5)  # no record: not carve's
    recover(make())
    assert mig.live == {("GPU-0", 5): foreign}


def test_failure_rolls_back_only_that_claim(world, tmp_path):
    cluster, _, make = world
    broken = DictMig(fail=True)
    p = make(mig_ops=broken)
    recover(p)
    good = put(cluster, "good", MIXED[1:])
    bad = put(cluster, "bad", MIXED)
    out = p.prepare([good, bad])
    assert out[good.uid].error == ""
    assert "gpu-0-mig-1g10gb-6" in out[bad.uid].error and "INSUFFICIENT_RESOURCES" in out[bad.uid].error
    assert set(p.state) == {good.uid}
    assert not (tmp_path / "plugin" / "claims" / bad.uid).exists()
    assert p.specs.claim_uids() == {good.uid}


def test_a_missing_device_node_fails_only_the_claims_that_need_it(world, tmp_path):
    cluster, _, make = world
    p = make()
    recover(p)
    (tmp_path / "root/dev/nvidia1").unlink()  # gpu-1's node gone; gpu-0 (the MIG parent) still there
    soft = put(cluster, "soft", MIXED[1:])
    whole_mig = put(cluster, "mig", MIXED[:1])
    out = p.prepare([soft, whole_mig])
    missing = f"device node /dev/nvidia1 does not exist in {tmp_path}/root/dev"
    assert out[soft.uid].error == f"claim ns/soft ({soft.uid}): {missing}"
    assert out[whole_mig.uid].error == ""
    assert set(p.state) == {whole_mig.uid} and p.specs.claim_uids() == {whole_mig.uid}
    assert not (tmp_path / "plugin" / "claims" / soft.uid).exists()  # its region was rolled back
    (tmp_path / "root/dev/nvidia1").touch()  # the node is back: the kubelet's retry succeeds
    assert p.prepare([soft])[soft.uid].error == ""


def test_an_unreadable_mig_capability_file_fails_the_claim_and_frees_the_instance(world, tmp_path):
    cluster, mig, make = world
    p = make()
    recover(p)
    for access in (tmp_path / "proc").rglob("gi1/ci0/access"):
        access.unlink()
    ref = put(cluster, "mig", MIXED[:1])
    error = p.prepare([ref])[ref.uid].error
    assert "MIG capability nodes of gpu0/gi1/ci0" in error and "gi1/ci0/access" in error
    assert mig.live == {} and p.state == {}


def test_unexpected_exception_is_an_internal_error_for_that_claim(world, caplog):
    cluster, _, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[1:])
    original = cluster.get_resource_claim
    cluster.get_resource_claim = lambda ns, n: (_ for _ in ()).throw(ZeroDivisionError("boom"))
    assert p.prepare([ref])[ref.uid].error == "internal error: ZeroDivisionError: boom"
    (logged,) = [r for r in caplog.records if "internal.error" in r.getMessage()]
    assert logged.exc_info and logged.exc_info[0] is ZeroDivisionError  # the traceback is in the log
    cluster.get_resource_claim = original
    assert p.prepare([ref])[ref.uid].error == ""


def lose_checkpoint(plugin_dir) -> None:
    """The whole checkpoint gone: its snapshot and its log."""
    (plugin_dir / "checkpoint.json").unlink()
    (plugin_dir / "checkpoint.log").unlink(missing_ok=True)


def test_lost_checkpoint_is_rebuilt_from_cdi_specs_and_mig_state(world, tmp_path):
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED)
    before = p.prepare([ref])[ref.uid]
    lose_checkpoint(tmp_path)
    q = make()
    assert recover(q) == "missing"
    rebuilt = q.state[ref.uid]
    assert sorted(d.cdi_ids[0] for d in rebuilt.devices) == sorted(d.cdi_ids[0] for d in before.devices)
    assert {d.share_id for d in rebuilt.devices} == {None, MIXED[1]["shareID"]}
    assert [d.mig.gpu_instance_id for d in rebuilt.devices if d.mig] == [1]
    assert q.unprepare([ref]) == {ref.uid: ""}
    assert mig.live == {} and q.specs.claim_uids() == set()


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


def test_a_prepare_another_process_left_half_done_is_undone_before_preparing_again(world, tmp_path):
    # Another process crashed mid-prepare: its checkpoint says PrepareStarted with a MIG instance at start 5.
    cluster, mig, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[:1])
    made = mig.create("GPU-0", "1g.10gb", 5)
    stale = ClaimRecord(
        ref.uid,
        "ns",
        "a",
        STATE_STARTED,
        [
            DeviceRecord(
                ["m"],
                "node-a",
                "gpu-0-mig-1g10gb-5",
                None,
                [],
                names.TYPE_MIG,
                "GPU-0",
                MigRecord("GPU-0", "1g.10gb", 5, made.gpu_instance_id, made.uuid, 0),
            )
        ],
    )
    Checkpoint(tmp_path / "checkpoint.json", "b1").save({ref.uid: stale})
    assert p.prepare([ref])[ref.uid].error == ""
    assert list(mig.live) == [("GPU-0", 6)]
    assert p.state[ref.uid].state == STATE_COMPLETED


def test_recovery_removes_claim_dirs_that_no_claim_owns(world, tmp_path):
    cluster, _, make = world
    p = make()
    recover(p)
    ref = put(cluster, "a", MIXED[1:])
    assert p.prepare([ref])[ref.uid].error == ""
    stray = tmp_path / "plugin" / "claims" / "not-a-prepared-claim"
    stray.mkdir()
    (stray / "region").write_bytes(b"x")
    assert recover(make()) == "ok"
    assert sorted(d.name for d in (tmp_path / "plugin" / "claims").iterdir()) == [ref.uid]


@pytest.mark.parametrize("content", ['{"devices": [{"containerEdits": {}}]}', '{"devices": [', ""])
def test_an_unreadable_cdi_spec_is_removed_when_rebuilding_the_checkpoint(world, tmp_path, content):
    # The plugin must not crash-loop on its own files: a spec it cannot read is dropped, the others kept.
    cluster, _, make = world
    p = make()
    recover(p)
    good, bad = put(cluster, "good", MIXED[1:]), put(cluster, "bad", MIXED[1:])
    assert {r.error for r in p.prepare([good, bad]).values()} == {""}
    lose_checkpoint(tmp_path)
    p.specs.path(bad.uid).write_text(content)
    q = make()
    assert recover(q) == "missing"
    assert set(q.state) == {good.uid}
    assert q.specs.claim_uids() == {good.uid}


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


def test_a_corrupt_mig_journal_is_moved_aside_not_fatal(world, tmp_path):
    _, _, make = world
    p = make()
    journal = tmp_path / "plugin" / "mig-journal.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("{not json")
    assert recover(p) == "missing" and p.migs.journal.entries() == []
    assert list(journal.parent.glob("mig-journal.json.corrupt-*"))


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


def test_a_full_state_disk_fails_the_claim_in_one_line_and_the_retry_succeeds(world, tmp_path, caplog):
    import errno
    import os

    cluster, _, make = world
    p = make()
    recover(p)
    done = put(cluster, "done", MIXED[1:])
    assert p.prepare([done])[done.uid].error == ""
    ref = put(cluster, "a", MIXED[1:])
    real_write = os.write

    def full(fd: int, data) -> int:  # the first bytes fit, then the filesystem is full
        if len(data) > 16:
            real_write(fd, bytes(data[:16]))
            return 16
        raise OSError(errno.ENOSPC, "No space left on device")

    os.write = full
    try:
        error = p.prepare([ref])[ref.uid].error
    finally:
        os.write = real_write
    assert error.startswith(f"claim ns/a ({ref.uid}): prepare: no space left on the plugin's state")
    assert not [r for r in caplog.records if "internal.error" in r.getMessage()]  # no traceback
    assert set(p.state) == {done.uid} and not (tmp_path / "plugin" / "claims" / ref.uid).exists()
    assert p.prepare([ref])[ref.uid].error == ""  # space again: the kubelet's retry
    fresh = make()
    recover(fresh)
    assert set(fresh.state) == {done.uid, ref.uid}  # the checkpoint reads whole after the torn writes
