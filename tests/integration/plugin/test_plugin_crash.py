"""Crash safety: the plugin SIGKILLs itself after each step of prepare and unprepare (CARVE_FAULT); after a
restart the kubelet's retry completes and no CDI spec, claim directory, MIG instance or checkpoint entry
is leaked or lost. Also: a corrupt checkpoint and a node reboot."""

from __future__ import annotations

import uuid

import grpc
import pytest
from support.plugin_harness import result, slice_config

from driver import names
from driver.plugin.faults import PREPARE_POINTS, UNPREPARE_POINTS

MIG_SOFT = "0=mig,1=soft,exclusive"
CLEAN = {"specs": [], "claim_dirs": [], "checkpoint": {}}


def mixed_claim(node):
    """One claim with a MIG device and a soft slice: every step of prepare has work to do."""
    return node.put_claim(
        "mixed",
        [
            result("mig", node.device("mig", profile="1g.10gb")),
            result("soft", "gpu-1", share_id=str(uuid.uuid4()), consumed={"memory": "4Gi", "cores": "30"}),
        ],
        [slice_config("soft")],
    )


def assert_prepared_once(node, uid: str) -> None:
    assert node.spec_files() == [names.cdi_spec_file_name(uid)]
    assert node.claim_dirs() == [uid]
    assert node.checkpoint_claims()[uid]["state"] == "PrepareCompleted"
    assert len(node.mig_instances()) == 1


@pytest.mark.parametrize("point", PREPARE_POINTS)
def test_crash_during_prepare_recovers(node, kubelet, plugin_factory, point):
    crashing = plugin_factory(MIG_SOFT, env={"CARVE_FAULT": point})
    claim = mixed_claim(node)
    with pytest.raises(grpc.RpcError):
        kubelet.prepare([claim])
    assert crashing.wait_exit() == -9
    assert f"point={point}" in crashing.log()

    plugin_factory(MIG_SOFT)
    if point == "prepare-after-checkpoint-completed":
        assert_prepared_once(node, claim[2])  # prepared before the crash: kept
    else:
        assert node.leftovers() == CLEAN and node.mig_instances() == []  # rolled back
    out = kubelet.prepare([claim])
    assert out[claim[2]]["error"] == ""
    assert sorted(d[2] for d in out[claim[2]]["devices"]) == sorted(
        [node.device("mig", profile="1g.10gb"), "gpu-1"]
    )
    assert_prepared_once(node, claim[2])
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    assert node.leftovers() == CLEAN and node.mig_instances() == []


@pytest.mark.parametrize("point", UNPREPARE_POINTS)
def test_crash_during_unprepare_recovers(node, kubelet, plugin_factory, point):
    crashing = plugin_factory(MIG_SOFT, env={"CARVE_FAULT": point})
    claim = mixed_claim(node)
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    with pytest.raises(grpc.RpcError):
        kubelet.unprepare([claim])
    assert crashing.wait_exit() == -9

    plugin_factory(MIG_SOFT)
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    assert node.leftovers() == CLEAN and node.mig_instances() == []


def test_corrupt_checkpoint_is_moved_aside_and_state_rebuilt(node, kubelet, plugin_factory):
    first = plugin_factory(MIG_SOFT)
    claim = mixed_claim(node)
    before = kubelet.prepare([claim])
    first.stop()
    checkpoint = node.plugin_dir / names.CHECKPOINT_FILE
    checkpoint.write_text(checkpoint.read_text()[:-40] + "garbage")

    second = plugin_factory(MIG_SOFT)
    assert "event=checkpoint.corrupt" in second.log()
    assert list(node.plugin_dir.glob("checkpoint.json.corrupt-*"))
    assert_prepared_once(node, claim[2])  # nothing prepared is forgotten
    again = kubelet.prepare([claim])
    assert sorted(d[3] for d in again[claim[2]]["devices"]) == sorted(
        d[3] for d in before[claim[2]]["devices"]
    )
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    assert node.leftovers() == CLEAN and node.mig_instances() == []


def test_reboot_voids_prepared_state(node, kubelet, plugin_factory, tmp_path):
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1\n")
    first = plugin_factory(MIG_SOFT, extra=("--boot-id-file", str(boot)))
    claim = node.put_claim(
        "soft", [result("s", "gpu-1", share_id=str(uuid.uuid4()), consumed={"memory": "1Gi"})]
    )
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    first.stop()
    boot.write_text("boot-2\n")
    second = plugin_factory(MIG_SOFT, extra=("--boot-id-file", str(boot)))
    assert "event=checkpoint.rebooted" in second.log()
    assert node.leftovers() == CLEAN
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""  # the kubelet prepares again after a reboot
    assert node.spec_files() == [names.cdi_spec_file_name(claim[2])]


def test_a_crash_mid_prepare_then_a_corrupt_checkpoint_leaks_no_mig_instance(node, kubelet, plugin_factory):
    # The instance exists, no CDI spec names it, and the checkpoint that did is gone: the MIG journal is
    # carve's remaining record of it, and the restart destroys it.
    crashing = plugin_factory(MIG_SOFT, env={"CARVE_FAULT": "prepare-after-mig"})
    claim = mixed_claim(node)
    with pytest.raises(grpc.RpcError):
        kubelet.prepare([claim])
    assert crashing.wait_exit() == -9
    assert len(node.mig_instances()) == 1
    checkpoint = node.plugin_dir / names.CHECKPOINT_FILE
    checkpoint.write_text(checkpoint.read_text()[:-40] + "garbage")

    restarted = plugin_factory(MIG_SOFT)
    assert "event=checkpoint.corrupt" in restarted.log() and "event=mig.orphan" in restarted.log()
    assert node.mig_instances() == [] and node.leftovers() == CLEAN
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    assert_prepared_once(node, claim[2])
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    assert node.leftovers() == CLEAN and node.mig_instances() == []


def test_a_prepared_claim_whose_spec_vanished_gets_it_back(node, kubelet, plugin_factory):
    first = plugin_factory(MIG_SOFT)
    claim = mixed_claim(node)
    before = kubelet.prepare([claim])
    instances = node.mig_instances()
    first.stop()
    (node.cdi_dir / names.cdi_spec_file_name(claim[2])).unlink()
    restarted = plugin_factory(MIG_SOFT)
    assert "event=cdi.missing" in restarted.log()
    assert kubelet.prepare([claim]) == before
    assert_prepared_once(node, claim[2])
    assert node.mig_instances() == instances  # the same instance, not a new one
    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    assert node.leftovers() == CLEAN and node.mig_instances() == []
