"""The claims' directories under the plugin's run directory (--run-dir, per-boot state on a tmpfs), and the
claims an older plugin prepared under <plugin-dir>/claims: kept, recovered and unprepared where they are."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest
from support.plugin_harness import result

from driver import names
from driver.plugin.container.edits import region_container_path

SOFT = "1=soft,exclusive"


def soft_claim(node, name: str, cores: str = "30"):
    share = str(uuid.uuid4())
    return node.put_claim(
        name, [result("slice", "gpu-1", share_id=share, consumed={"memory": "4Gi", "cores": cores})]
    )


def spec_of(node, uid: str) -> dict:
    return json.loads((node.cdi_dir / names.cdi_spec_file_name(uid)).read_text())


def env_of(doc: dict) -> dict:
    edits = [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]
    return dict(e.split("=", 1) for ed in edits for e in ed.get("env", []))


def mount_sources(doc: dict) -> list[str]:
    edits = [doc.get("containerEdits", {})] + [d["containerEdits"] for d in doc["devices"]]
    return [m["hostPath"] for ed in edits for m in ed.get("mounts", [])]


def device_of(path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


@pytest.fixture
def run_tmpfs(node):
    """The node's run directory, a tmpfs of its own as /run is (plugin_factory unmounts it at the end)."""
    if os.geteuid() != 0:
        pytest.skip("mounting the run directory's tmpfs needs root")
    run = node.root / "run"
    run.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "carve-run-test", str(run)], check=True)
    return run


def test_a_soft_claim_is_prepared_under_the_run_dir_with_its_region_tmpfs(
    node, kubelet, plugin_factory, run_tmpfs
):
    plugin_factory(SOFT, extra=("--run-dir", str(run_tmpfs), "--region-fs", "on"))
    claim = soft_claim(node, "soft")
    uid = claim[2]
    assert kubelet.prepare([claim])[uid]["error"] == ""

    root = run_tmpfs / "claims" / uid
    assert (root / "limits" / "limits").is_file()
    assert os.path.ismount(root / "region")  # each region still a size-bounded tmpfs of its own
    assert not (node.plugin_dir / "claims").exists()  # nothing per boot on the kubelet's disk
    assert (node.plugin_dir / names.CHECKPOINT_FILE).exists()  # the checkpoint stays (DESIGN contract)
    doc = spec_of(node, uid)
    claim_mounts = [p for p in mount_sources(doc) if uid in p]
    assert claim_mounts and all(p.startswith(str(root) + "/") for p in claim_mounts), claim_mounts
    # The limiter's trust anchor names the run directory's tmpfs, another device than the plugin directory.
    env = env_of(doc)
    assert env[names.ENV_LIMITS_SOURCE] == f"{device_of(run_tmpfs / 'claims')}:/claims"
    assert device_of(run_tmpfs) != device_of(node.plugin_dir)
    # The container-side paths are the contract: unchanged.
    assert env[names.ENV_REGION] == region_container_path(uid) == f"/var/run/carve/{uid}/region"

    assert kubelet.unprepare([claim]) == {uid: ""}
    assert not root.exists() and node.checkpoint_claims() == {}


@pytest.mark.parametrize("crash", [False, True], ids=["stopped", "killed"])
def test_claims_an_older_plugin_prepared_under_the_plugin_dir_are_recovered_and_unprepared(
    node, kubelet, plugin_factory, run_tmpfs, crash
):
    # Before --run-dir the claims' directories were <plugin-dir>/claims/<uid>: what a plugin whose run
    # directory is its plugin directory writes, byte for byte.
    old = plugin_factory(SOFT)
    assert node.run_dir == node.plugin_dir
    before = soft_claim(node, "before")
    whole = node.put_claim("whole", [result("gpu", "gpu-2")])
    out = kubelet.prepare([before, whole])
    assert all(not r["error"] for r in out.values()), out
    legacy = node.plugin_dir / "claims" / before[2]
    limits = (legacy / "limits" / "limits").read_bytes()
    spec = spec_of(node, before[2])
    # The status reports leave from a thread of their own: let them land before a kill, which would tear
    # the file-backed API server's stand-in (not the plugin's state) mid-write.
    deadline = time.monotonic() + 10
    while not all(
        node.cluster.get_resource_claim(ns, n).get("status", {}).get("devices")
        for ns, n, _ in (before, whole)
    ):
        assert time.monotonic() < deadline, "status reports not written"
        time.sleep(0.02)
    if crash:
        old.proc.kill()
        old.proc.wait()
    else:
        old.stop()

    # The new plugin, with its run directory elsewhere: the old claim is still prepared where it was.
    new = plugin_factory(SOFT, extra=("--run-dir", str(run_tmpfs), "--region-interval", "0.1"))
    assert legacy.is_dir() and (legacy / "limits" / "limits").read_bytes() == limits
    again = kubelet.prepare([before])[before[2]]
    assert again["error"] == "" and spec_of(node, before[2]) == spec  # answered from the checkpoint
    assert "claimdir.stray-removed" not in new.log()

    # A new claim goes to the run directory, next to the old one on the same GPU.
    after = soft_claim(node, "after", cores="20")
    assert kubelet.prepare([after])[after[2]]["error"] == ""
    assert (run_tmpfs / "claims" / after[2] / "limits" / "limits").is_file()
    assert not (node.plugin_dir / "claims" / after[2]).exists()
    # The region watcher reads the old claim's limits and region where they are (a wrong place would be
    # reported as unreadable), passes after the new claim included.
    new.wait_for_log(r"event=regions\.limits-updated|event=plugin\.started")
    time.sleep(0.5)
    assert f"uid={before[2]}" not in "".join(
        line
        for line in new.log().splitlines()
        if "regions.limits-unreadable" in line or "regions.skipped" in line
    ), new.log()

    assert kubelet.unprepare([before, whole, after]) == {before[2]: "", whole[2]: "", after[2]: ""}
    assert not legacy.exists() and not (run_tmpfs / "claims" / after[2]).exists()
    assert node.checkpoint_claims() == {} and node.spec_files() == []


def test_a_stray_directory_in_either_place_is_removed_at_start(node, plugin_factory, run_tmpfs):
    for top in (node.plugin_dir / "claims", run_tmpfs / "claims"):
        (top / "not-a-prepared-claim" / "limits").mkdir(parents=True)
    plugin = plugin_factory(SOFT, extra=("--run-dir", str(run_tmpfs)))
    plugin.wait_for_log("claimdir.stray-removed")
    assert list((node.plugin_dir / "claims").iterdir()) == [] == list((run_tmpfs / "claims").iterdir())


def test_a_claim_another_older_process_prepares_meanwhile_is_found_after_its_checkpoint_is_adopted(
    tmp_path, stub_cache
):
    # A rolling update: this process (with a run directory) started before another plugin process of the
    # old layout prepared a claim. Adopting that process's checkpoint (sync) reads the old place again, so
    # the region watcher, the metrics and the neighbours' shares find the claim's files where they are.
    from support.driverroot import LAYOUTS, build_driver_root, hook_dir

    from driver.cluster import LocalCluster
    from driver.plugin.claims.catalog import NodeDevice
    from driver.plugin.claims.plan import ClaimRef
    from driver.plugin.claims.preparer import Preparer, PreparerSettings
    from driver.plugin.container.edits import HostLayout
    from driver.plugin.state.checkpoint import Checkpoint
    from driver.plugin.state.recovery import recover

    limiter = hook_dir(tmp_path / "lib")
    (limiter / names.LIMITER_LIBRARY).touch()
    driver = build_driver_root(tmp_path / "root", LAYOUTS["rhel"], stub_cache)
    catalog = {"gpu-1": NodeDevice("gpu-1", names.TYPE_VGPU, "GPU-1", 1, {"memory": 80 << 30, "cores": 100})}
    cluster = LocalCluster()

    def preparer(run_dir):
        return Preparer(
            PreparerSettings("node-a", tmp_path / "plugin", tmp_path / "cdi", limiter, run_dir),
            cluster,
            HostLayout.scan(driver, hook_dir=limiter),
            None,
            lambda: catalog,
            Checkpoint(tmp_path / "plugin" / names.CHECKPOINT_FILE, "boot"),
        )

    new, old = preparer(tmp_path / "run"), preparer(None)
    recover(new)
    stored = cluster.put_resource_claim(
        {
            "metadata": {"name": "c", "namespace": "ns"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "s",
                                "driver": names.DRIVER_NAME,
                                "pool": "node-a",
                                "device": "gpu-1",
                                "shareID": str(uuid.uuid4()),
                                "consumedCapacity": {"memory": "1Gi", "cores": "10"},
                            }
                        ]
                    }
                }
            },
        }
    )
    ref = ClaimRef("ns", "c", stored["metadata"]["uid"])
    assert old.prepare([ref])[ref.uid].error == ""
    legacy = tmp_path / "plugin" / "claims" / ref.uid
    assert (legacy / "limits" / "limits").is_file()
    assert new.claims_dir / ref.uid == tmp_path / "run" / "claims" / ref.uid  # not known yet
    with new.node_lock.hold():
        new.sync()
    assert ref.uid in new.state and new.claims_dir / ref.uid == legacy
    assert new.unprepare([ref]) == {ref.uid: ""} and not legacy.exists()
