"""An MPS share's pinned-memory limit names its GPU's CUDA ordinal in the container (PCI order, as the
limiter's), not 0: in a claim with a soft slice on the GPU before it, the MPS GPU is ordinal 1."""

from __future__ import annotations

import json

from support.preparer_world import GI, preparer_world, put, share

from driver import names
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.state.recovery import recover

CATALOG = {
    "gpu-a": NodeDevice(
        "gpu-a", names.TYPE_VGPU, "GPU-A", 0, {"memory": 80 * GI, "cores": 100}, pci_bus_id="0000:01:00.0"
    ),
    "gpu-b-mps": NodeDevice(
        "gpu-b-mps", names.TYPE_MPS, "GPU-B", 1, {"memory": 80 * GI, "cores": 100}, pci_bus_id="0000:02:00.0"
    ),
}


def test_an_mps_share_behind_a_soft_slice_pins_memory_on_its_own_ordinal(tmp_path, stub_cache):
    cluster, _, make = preparer_world(tmp_path, stub_cache, CATALOG)
    p = make()
    recover(p)
    (tmp_path / "pipe").mkdir()
    p.mps_pipe_dir = lambda uuid: tmp_path / "pipe" if uuid == "GPU-B" else None
    ref = put(
        cluster,
        "soft-and-mps",
        [
            share("s", "gpu-a", "0b0e0a0d-1111-4222-8333-444455556666"),
            share("m", "gpu-b-mps", "0b0e0a0d-1111-4222-8333-444455556667"),
        ],
    )
    assert p.prepare([ref])[ref.uid].error == ""
    spec = json.loads(p.specs.path(ref.uid).read_text())
    env = dict(e.split("=", 1) for e in spec["containerEdits"]["env"])
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "1=2048M"
