"""A ResourceSlice written by hand for `carve allocate` or `carve simulate` may leave out
`spec.pool.resourceSliceCount` (the API server fills in nothing, it refuses such a slice, but a file is
not the API server): carve reads it as a pool of one slice, so the pool is complete and its devices are
allocated, as they would be with the count written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from allocate_cli import carve_allocate, vgpu_claim, vgpu_slice


@pytest.mark.parametrize(
    "pool",
    [{"name": "n1", "generation": 1}, {"name": "n1"}],
    ids=["no resourceSliceCount", "neither count nor generation"],
)
def test_a_slice_without_its_pools_count_is_a_whole_pool(tmp_path: Path, pool: dict) -> None:
    r = carve_allocate(tmp_path, [vgpu_slice(pool=pool)], [vgpu_claim()])
    assert r.returncode == 0, r.stderr
    item = yaml.safe_load(r.stdout)["items"][0]
    assert item["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
