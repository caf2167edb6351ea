"""The Preparer in process for the tests of tests/integration/plugin/test_plugin_preparer_*.py: a node of
two GPUs (GPU-0 MIG-capable, with two 1g.10gb placements; GPU-1 soft), MIG emulated by a dict that behaves as
NVML does, and claims allocated on that node."""

from __future__ import annotations

from support.driverroot import LAYOUTS, build_driver_root, hook_dir, write_proc_root

from driver import names
from driver.cluster import LocalCluster
from driver.gpu.model import MigInstance, MigPlacement
from driver.plugin.claims.catalog import NodeDevice
from driver.plugin.claims.plan import ClaimRef
from driver.plugin.claims.preparer import Preparer, PreparerSettings
from driver.plugin.container.edits import HostLayout
from driver.plugin.state.checkpoint import Checkpoint

GI = 1024**3
CATALOG = {
    "gpu-0-mig-1g10gb-6": NodeDevice(
        "gpu-0-mig-1g10gb-6",
        names.TYPE_MIG,
        "GPU-0",
        0,
        {"memory": 10 * GI},
        profile="1g.10gb",
        placement_start=6,
    ),
    "gpu-0-mig-1g10gb-5": NodeDevice(
        "gpu-0-mig-1g10gb-5",
        names.TYPE_MIG,
        "GPU-0",
        0,
        {"memory": 10 * GI},
        profile="1g.10gb",
        placement_start=5,
    ),
    "gpu-0": NodeDevice("gpu-0", names.TYPE_GPU, "GPU-0", 0, {"memory": 80 * GI}, mig_capable=True),
    "gpu-1": NodeDevice("gpu-1", names.TYPE_VGPU, "GPU-1", 1, {"memory": 80 * GI, "cores": 100}),
}


class DictMig:
    def __init__(self, fail: bool = False):
        self.live: dict[tuple[str, int], MigInstance] = {}
        self.fail = fail
        self.next_gi = 1
        self.created = 0
        self.mig_mode = {"GPU-0": True}
        self.mode_calls: list[tuple[str, bool]] = []

    def create(self, gpu_uuid, profile, start):
        # As NvmlMig.create (reuse=False): an instance already at the placement is an error.
        if self.fail:
            raise RuntimeError("NVML_ERROR_INSUFFICIENT_RESOURCES")
        key = (gpu_uuid, start)
        if key in self.live:
            raise RuntimeError(f"MigPlacementError: an instance is already at {start}")
        self.created += 1
        self.live[key] = MigInstance(
            f"MIG-{gpu_uuid}-{start}-{self.next_gi}",
            19,
            profile,
            MigPlacement(start, 1),
            self.next_gi,
            0,
            10 * GI,
            14,
        )
        self.next_gi += 1
        return self.live[key]

    def destroy(self, gpu_uuid, gi, ci, uuid):
        # As destroy_mig_instance with a uuid: refuses an instance whose UUID is not the recorded one.
        (key,) = [k for k, v in self.live.items() if k[0] == gpu_uuid and v.gpu_instance_id == gi]
        if self.live[key].uuid != uuid or self.live[key].compute_instance_id != ci:
            raise RuntimeError(f"MigOwnershipError: gi {gi} is {self.live[key].uuid}, not {uuid}")
        del self.live[key]

    def instances(self, gpu_uuid):
        return [v for k, v in self.live.items() if k[0] == gpu_uuid]

    def set_mig_mode(self, gpu_uuid, enabled):
        # As NVML: MIG cannot go off over live GPU instances; the change then stays pending.
        self.mode_calls.append((gpu_uuid, enabled))
        if not enabled and self.instances(gpu_uuid):
            return True, False
        self.mig_mode[gpu_uuid] = enabled
        return enabled, None


def preparer_world(tmp_path, stub_cache, catalog=None, mig=None, checkpoint=None):
    """(cluster, mig, make): make(boot, mig_ops) builds a Preparer of this node's files under tmp_path.

    `catalog` (default CATALOG) is read at each prepare, so a test may change it; `mig` replaces DictMig;
    `checkpoint` is the checkpoint's path (default tmp_path/checkpoint.json)."""
    cluster = LocalCluster()
    mig = DictMig() if mig is None else mig
    devices = CATALOG if catalog is None else catalog
    checkpoint = tmp_path / "checkpoint.json" if checkpoint is None else checkpoint
    limiter = hook_dir(tmp_path / "lib")  # with carve-cdi-hook and carve-ldconfig, as on a node
    (limiter / names.LIMITER_LIBRARY).touch()
    driver = build_driver_root(tmp_path / "root", LAYOUTS["rhel"], stub_cache)
    # The capability files of the GPU instances DictMig hands out (gi 1.., ci 0) on GPU minor 0.
    proc = write_proc_root(
        tmp_path / "proc", {(0, gi, ci): (3 + gi * 9 + (0 if ci is None else 1), 292) for gi in range(1, 9)
                            for ci in (None, 0)}
    )  # fmt: skip

    def make(boot="b1", mig_ops=None):
        return Preparer(
            PreparerSettings("node-a", tmp_path / "plugin", tmp_path / "cdi", limiter),
            cluster,
            HostLayout.scan(driver, proc, hook_dir=limiter),
            mig_ops or mig,
            lambda: devices,
            Checkpoint(checkpoint, boot),
        )

    return cluster, mig, make


def put(cluster, name, results):
    obj = cluster.put_resource_claim(
        {
            "metadata": {"name": name, "namespace": "ns"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"driver": names.DRIVER_NAME, "pool": "node-a", **r} for r in results]
                    }
                }
            },
        }
    )
    return ClaimRef("ns", name, obj["metadata"]["uid"])


MIXED = [
    {"request": "m", "device": "gpu-0-mig-1g10gb-6"},
    {
        "request": "s",
        "device": "gpu-1",
        "shareID": "0b0e0a0d-1111-4222-8333-444455556666",
        "consumedCapacity": {"memory": "2Gi", "cores": "10"},
    },
]


def share(request: str, device: str, share_id: str) -> dict:
    """An allocation result taking a share of `device` (2Gi, 10 cores), as the scheduler writes one."""
    return {
        "request": request,
        "device": device,
        "shareID": share_id,
        "consumedCapacity": {"memory": "2Gi", "cores": "10"},
    }


def lose_checkpoint(plugin_dir) -> None:
    """The whole checkpoint gone: its snapshot and its log."""
    (plugin_dir / "checkpoint.json").unlink()
    (plugin_dir / "checkpoint.log").unlink(missing_ok=True)
