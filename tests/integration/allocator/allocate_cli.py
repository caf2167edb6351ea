"""`carve allocate` run as a user runs it: the CLI in a process of its own, from the repository, on slice
and claim files written for the test and the chart's DeviceClasses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
ENTRY = "import sys; from driver.cli import main; sys.exit(main())"


def carve_allocate(tmp_path: Path, slices: list[dict], claims: list[dict]) -> subprocess.CompletedProcess:
    """Write `slices` and `claims` as YAML streams and run `carve allocate` on them."""
    (tmp_path / "s.yaml").write_text(yaml.safe_dump_all(slices))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all(claims))
    args = [
        "--slices",
        str(tmp_path / "s.yaml"),
        "--classes",
        str(REPO / "deviceclasses"),
        "--claims",
        str(tmp_path / "c.yaml"),
    ]
    return subprocess.run(
        [sys.executable, "-c", ENTRY, "allocate", *args], capture_output=True, text=True, timeout=60, cwd=REPO
    )


def vgpu_slice(
    name: str = "n1-0", device: str = "gpu-0", memory: str = "8Gi", count: int = 1, pool: dict | None = None
) -> dict:
    """Node n1's slice `name` of one soft-slice GPU `device` (its UUID ends in the device's last
    character), in pool n1 of `count` slices, or in `pool` as given."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.carve.dev",
            "nodeName": "n1",
            "pool": pool
            if pool is not None
            else {"name": "n1", "generation": 1, "resourceSliceCount": count},
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


def vgpu_claim(
    memory: str = "1Gi", cores: str = "20", count: int | None = None, config: dict | None = None
) -> dict:
    """Claim default/c for `count` (default one) soft slices of `memory` and `cores`; `config`: the
    parameters of a SliceConfig given with it."""
    exactly: dict = {
        "deviceClassName": "vgpu.carve.dev",
        "capacity": {"requests": {"memory": memory, "cores": cores}},
    }
    if count is not None:
        exactly["count"] = count
    devices: dict = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if config is not None:
        parameters = {"apiVersion": "gpu.carve.dev/v1alpha1", "kind": "SliceConfig", **config}
        devices["config"] = [{"opaque": {"driver": "gpu.carve.dev", "parameters": parameters}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": devices},
    }
