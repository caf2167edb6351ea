"""`carve allocate` asks the plugin's planner whether a claim it allocated would prepare, with the devices
of the pool the claim was allocated from. Every node's pool names its GPUs alike (`gpu-0` on each), and
another driver's pool may carry a node's name, so the planner must be given exactly carve's slices of
that pool, all of them: a `gpu-0` of another node or driver read in its place, or a device of the pool's
other slice left out, made a claim that prepares fine be reported as one the plugin would refuse."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from allocate_cli import carve_allocate, vgpu_claim, vgpu_slice

DRIVER = "gpu.carve.dev"


def whole_gpu_slice(name: str, driver: str, pool: str) -> dict:
    # a whole GPU of the same device name: its request is the card's memory, so a 1Gi memoryLimit
    # is below it and the planner refuses the claim if it reads this device instead of n1's
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": pool,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": "GPU-99999999-2222-3333-4444-555555555555"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            ],
        },
    }


CLAIM = vgpu_claim(config={"memoryLimit": "1Gi"})


def allocate(tmp_path: Path, slices: list[dict], claim: dict = CLAIM) -> subprocess.CompletedProcess:
    return carve_allocate(tmp_path, slices, [claim])


def test_the_claim_alone_prepares(tmp_path: Path) -> None:
    r = allocate(tmp_path, [vgpu_slice()])
    assert r.returncode == 0, r.stderr
    item = yaml.safe_load(r.stdout)["items"][0]
    assert item["status"]["allocation"]["devices"]["results"][0]["pool"] == "n1"


@pytest.mark.parametrize(
    "other",
    [
        whole_gpu_slice("n2-0", DRIVER, "n2"),
        whole_gpu_slice("n0-0", DRIVER, "n0"),  # pool names that sort after and before the claim's
        whole_gpu_slice("n1-other", "other.example.com", "n1"),
        whole_gpu_slice("n1-dra", "dra.example.com", "n1"),  # driver names after and before carve's
    ],
    ids=[
        "carve's pool of a node after",
        "carve's pool of a node before",
        "another driver's pool of the same name, after",
        "another driver's pool of the same name, before",
    ],
)
def test_a_same_named_device_elsewhere_is_not_read_for_the_claims_pool(tmp_path: Path, other: dict) -> None:
    r = allocate(tmp_path, [vgpu_slice(), other])  # read after n1's: it would replace n1's gpu-0
    assert r.returncode == 0, r.stderr
    assert "prepare would fail" not in r.stderr
    item = yaml.safe_load(r.stdout)["items"][0]
    result = item["status"]["allocation"]["devices"]["results"][0]
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, "n1", "gpu-0")


def test_every_slice_of_a_pool_of_two_is_read(tmp_path: Path) -> None:
    # one device from each slice of the pool: each slice document names its pool with a string of its
    # own, and the planner must find both devices, whichever slice a result's pool name came from
    slices = [vgpu_slice("n1-0", "gpu-0", count=2), vgpu_slice("n1-1", "gpu-1", count=2)]
    claim = vgpu_claim(count=2, config={"memoryLimit": "1Gi"})
    r = allocate(tmp_path, slices, claim)
    assert r.returncode == 0, r.stderr
    results = yaml.safe_load(r.stdout)["items"][0]["status"]["allocation"]["devices"]["results"]
    assert sorted((x["pool"], x["device"]) for x in results) == [("n1", "gpu-0"), ("n1", "gpu-1")]
