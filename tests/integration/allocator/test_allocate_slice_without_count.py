"""A ResourceSlice written by hand for `carve allocate` or `carve simulate` may leave out
`spec.pool.resourceSliceCount` (the API server fills in nothing, it refuses such a slice, but a file is
not the API server): carve reads it as a pool of one slice, so the pool is complete and its devices are
allocated, as they would be with the count written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def slice_(pool: dict) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-0"},
        "spec": {
            "driver": "gpu.carve.dev",
            "nodeName": "n1",
            "pool": pool,
            "devices": [
                {
                    "name": "gpu-0",
                    "allowMultipleAllocations": True,
                    "attributes": {
                        "type": {"string": "vgpu"},
                        "uuid": {"string": "GPU-11111111-2222-3333-4444-555555555555"},
                    },
                    "capacity": {"memory": {"value": "8Gi"}, "cores": {"value": "100"}},
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
            ]
        }
    },
}


@pytest.mark.parametrize(
    "pool",
    [{"name": "n1", "generation": 1}, {"name": "n1"}],
    ids=["no resourceSliceCount", "neither count nor generation"],
)
def test_a_slice_without_its_pools_count_is_a_whole_pool(tmp_path: Path, pool: dict) -> None:
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(slice_(pool)))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(CLAIM))
    entry = "import sys; from driver.cli import main; sys.exit(main())"
    r = subprocess.run(
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
    assert r.returncode == 0, r.stderr
    item = yaml.safe_load(r.stdout)["items"][0]
    assert item["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
