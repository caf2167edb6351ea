"""The Preparer refuses what planning refuses before it writes anything: a bad shareID, and a claim config
that its DeviceClass does not allow. The other claims of the same call are prepared."""

from __future__ import annotations

import os

import pytest
from support.driverroot import LAYOUTS, build_driver_root, hook_dir, write_proc_root

from driver import names
from driver.cluster import LocalCluster
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import HostLayout
from driver.plugin.state.checkpoint import Checkpoint
from driver.plugin.state.recovery import recover

GI = 1024**3
CATALOG = {"gpu-1": NodeDevice("gpu-1", names.TYPE_VGPU, "GPU-1", 1, {"memory": 80 * GI, "cores": 100})}
SHARE = "0b0e0a0d-1111-4222-8333-444455556666"


class NoMig:
    def create(self, gpu_uuid, profile, start):
        raise AssertionError("no MIG device in this test")

    def destroy(self, gpu_uuid, gi):
        raise AssertionError("no MIG device in this test")

    def instances(self, gpu_uuid):
        return []


@pytest.fixture
def world(tmp_path, stub_cache):
    cluster = LocalCluster()
    limiter = hook_dir(tmp_path / "lib")  # with carve-cdi-hook and carve-ldconfig, as on a node
    (limiter / names.LIMITER_LIBRARY).touch()
    driver = build_driver_root(tmp_path / "root", LAYOUTS["rhel"], stub_cache)
    preparer = Preparer(
        PreparerSettings("node-a", tmp_path / "plugin", tmp_path / "cdi", limiter),
        cluster,
        HostLayout.scan(driver, write_proc_root(tmp_path / "proc", {}), hook_dir=limiter),
        NoMig(),
        lambda: CATALOG,
        Checkpoint(tmp_path / "checkpoint.json", "b1"),
    )
    recover(preparer)
    return cluster, preparer, tmp_path


def put(cluster, name, share_id=SHARE, config=(), class_name="vgpu.carve.dev"):
    obj = cluster.put_resource_claim(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "devices": {
                    "requests": [{"name": "s", "exactly": {"deviceClassName": class_name}}],
                    "config": [
                        {k: v for k, v in c.items() if k != "source"}
                        for c in config
                        if c["source"] == "FromClaim"
                    ],
                }
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "s",
                                "driver": names.DRIVER_NAME,
                                "pool": "node-a",
                                "device": "gpu-1",
                                "shareID": share_id,
                                "consumedCapacity": {"memory": "2Gi", "cores": "20"},
                            }
                        ],
                        "config": list(config),
                    }
                }
            },
        }
    )
    return ClaimRef("ns", name, obj["metadata"]["uid"])


def slice_config(source: str, **fields) -> dict:
    parameters = {"apiVersion": names.CONFIG_API_VERSION, "kind": "SliceConfig", **fields}
    return {"source": source, "opaque": {"driver": names.DRIVER_NAME, "parameters": parameters}}


def files_of(tmp_path, uid: str) -> list[str]:
    found = []
    for root, _dirs, files in os.walk(tmp_path):
        found += [os.path.join(root, f) for f in files if uid in os.path.join(root, f)]
    return found


def test_bad_share_id_fails_that_claim_before_any_file_is_written(world):
    cluster, preparer, tmp_path = world
    good = put(cluster, "good")
    bad = put(cluster, "bad", share_id="../evil")
    out = preparer.prepare([bad, good])
    assert out[bad.uid].error == (
        f"claim ns/bad ({bad.uid}): status.allocation.devices.results[0]: shareID: '../evil' is not a "
        "lowercase UUID (8-4-4-4-12)"
    )
    assert out[good.uid].error == ""
    assert files_of(tmp_path, bad.uid) == []
    assert set(preparer.state) == {good.uid}
    assert preparer.specs.claim_uids() == {good.uid}


def test_claim_disabling_throttling_is_refused_unless_its_class_allows_it(world):
    cluster, preparer, tmp_path = world
    wants_off = slice_config("FromClaim", corePolicy="disable")
    refused = put(cluster, "refused", config=[wants_off])
    allows = slice_config("FromClass", claimPolicy={"corePolicy": ["disable"]})
    allowed = put(cluster, "allowed", config=[allows, wants_off], class_name="vgpu-burst.carve.dev")
    out = preparer.prepare([refused, allowed])
    assert out[refused.uid].error.startswith(
        f"claim ns/refused ({refused.uid}): device gpu-1: claim config[0]: opaque.parameters.corePolicy: "
        "'disable' is not allowed by DeviceClass vgpu.carve.dev"
    )
    assert files_of(tmp_path, refused.uid) == []
    assert out[allowed.uid].error == ""
    # What the limiter of the allowed claim's containers is told (the CDI spec's environment).
    env = [e for d in [preparer.specs.read(allowed.uid)] for e in d["containerEdits"].get("env", [])]
    assert f"{names.ENV_CORE_POLICY}=disable" in env
