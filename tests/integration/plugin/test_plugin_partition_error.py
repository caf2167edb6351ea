"""A claim whose memory the driver should enforce, on a plugin without driver partition support: the claim
fails with an error naming the first of its GPUs (sorted by UUID, as memory_partitions orders them), and
leaves nothing behind."""

from __future__ import annotations

from support.preparer_world import GI, preparer_world, put, share

from driver import names
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.state.recovery import recover


def _soft(name: str, uuid: str, minor: int) -> NodeDevice:
    return NodeDevice(
        name,
        names.TYPE_VGPU,
        uuid,
        minor,
        {"memory": 80 * GI, "cores": 100},
        memory_enforcement=names.MEMORY_ENFORCEMENT_DRIVER,
    )


CATALOG = {"gpu-b": _soft("gpu-b", "GPU-B", 1), "gpu-a": _soft("gpu-a", "GPU-A", 0)}


def test_a_driver_enforced_claim_without_partition_support_names_its_first_gpu(tmp_path, stub_cache):
    cluster, _, make = preparer_world(tmp_path, stub_cache, CATALOG)
    p = make()
    recover(p)
    assert p.partition_host is None
    ref = put(
        cluster,
        "two-gpus",
        [
            share("b", "gpu-b", "0b0e0a0d-1111-4222-8333-444455556666"),
            share("a", "gpu-a", "0b0e0a0d-1111-4222-8333-444455556667"),
        ],
    )
    error = p.prepare([ref])[ref.uid].error
    assert "GPU GPU-A: its memory is published as enforced by the driver" in error, error
    assert "GPU-B" not in error
    assert p.state == {} and p.specs.claim_uids() == set()
