"""`carve allocate` asks the plugin's planner whether a claim it allocated would prepare, with the devices
of the pool the claim was allocated from. Every node's pool names its GPUs alike (`gpu-0` on each), and
another driver's pool may carry a node's name, so the planner must be given exactly carve's slices of
that pool, all of them: a `gpu-0` of another node or driver read in its place, or a device of the pool's
other slice left out, made a claim that prepares fine be reported as one the plugin would refuse."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
DRIVER = "gpu.carve.dev"


def soft_slice(name: str = "n1-0", device: str = "gpu-0", memory: str = "8Gi", count: int = 1) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": count},
            "devices": [
                {
                    "name": device,
                    "allowMultipleAllocations": True,
                    "attributes": {
                        "type": {"string": "vgpu"},
                        "uuid": {"string": f"GPU-11111111-2222-3333-4444-55555555555{device[-1]}"},
                    },
                    "capacity": {"memory": {"value": memory}, "cores": {"value": "100"}},
                }
            ],
        },
    }


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


CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "vgpu.carve.dev",
                        "capacity": {"requests": {"memory": "1Gi", "cores": "20"}},
                    },
                }
            ],
            "config": [
                {
                    "opaque": {
                        "driver": DRIVER,
                        "parameters": {
                            "apiVersion": "gpu.carve.dev/v1alpha1",
                            "kind": "SliceConfig",
                            "memoryLimit": "1Gi",
                        },
                    }
                }
            ],
        }
    },
}


def allocate(tmp_path: Path, slices: list[dict], claim: dict = CLAIM) -> subprocess.CompletedProcess:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump_all(slices))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(claim))
    entry = "import sys; from driver.cli import main; sys.exit(main())"
    return subprocess.run(
        [
            sys.executable,
            "-c",
            entry,
            "allocate",
            "--slices",
            str(tmp_path / "s.yaml"),
            "--classes",
            str(REPO / "deviceclasses"),
            "--claims",
            str(tmp_path / "c.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_the_claim_alone_prepares(tmp_path: Path) -> None:
    r = allocate(tmp_path, [soft_slice()])
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
    r = allocate(tmp_path, [soft_slice(), other])  # read after n1's: it would replace n1's gpu-0
    assert r.returncode == 0, r.stderr
    assert "prepare would fail" not in r.stderr
    item = yaml.safe_load(r.stdout)["items"][0]
    result = item["status"]["allocation"]["devices"]["results"][0]
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, "n1", "gpu-0")


def test_every_slice_of_a_pool_of_two_is_read(tmp_path: Path) -> None:
    # one device from each slice of the pool: each slice document names its pool with a string of its
    # own, and the planner must find both devices, whichever slice a result's pool name came from
    slices = [soft_slice("n1-0", "gpu-0", count=2), soft_slice("n1-1", "gpu-1", count=2)]
    claim = copy.deepcopy(CLAIM)
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    r = allocate(tmp_path, slices, claim)
    assert r.returncode == 0, r.stderr
    results = yaml.safe_load(r.stdout)["items"][0]["status"]["allocation"]["devices"]["results"]
    assert sorted((x["pool"], x["device"]) for x in results) == [("n1", "gpu-0"), ("n1", "gpu-1")]
