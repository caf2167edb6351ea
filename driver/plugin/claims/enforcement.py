"""A claim's container edits for memory enforcement beyond the limiter (docs/enforcement.md): the driver
partition's hooks where the driver enforces a share's memory, and the MPS client setup of an MPS share.
What the node has for either (the partition host, each GPU's MPS daemon) comes in `EnforcementHosts`; a
claim that needs what the node lacks fails with an error naming the GPU."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from driver.plugin.claims.plan import ClaimPlan, PrepareError, device_memory, memory_partitions
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.container.enforcement_edits import (
    CGROUPS_DIR,
    DriverPartition,
    MpsShare,
    MpsUserCheck,
    PartitionHost,
    mps_edits,
    partition_edits,
)


@dataclass(frozen=True)
class EnforcementHosts:
    partition_host: PartitionHost | None  # None: no driver partition support on this node
    mps_pipe_dir: Callable[[str], Path | None]  # a GPU's MPS pipe directory; None: no daemon runs for it
    mps_state_dir: Callable[[str], Path | None]
    mps_shm_dir: Path | None  # --mps-shm-dir: the daemons' /dev/shm on the host
    mps_user_check: MpsUserCheck | None  # None: no mps-user hook (no control binary)


def enforcement_edits(plan: ClaimPlan, files: ClaimFiles, limits, hosts: EnforcementHosts):
    """The driver partition's hooks and the MPS client setup of a claim, or None when it has neither."""
    ref = plan.ref
    edits = None
    parts = memory_partitions(plan)
    if parts:
        if hosts.partition_host is None:
            raise PrepareError(
                f"{ref}: GPU {parts[0].gpu_uuid}: its memory is published as enforced by the driver, but "
                "this plugin has no driver partition support (NVML library or cgroup v2 not found)"
            )
        record = files.root / CGROUPS_DIR
        record.mkdir(mode=0o700, parents=True, exist_ok=True)
        edits = partition_edits(
            hosts.partition_host, record, [DriverPartition(p.gpu_uuid, p.soft, p.hard) for p in parts]
        )
    for p in plan.devices:
        if not p.device.is_mps:
            continue
        pipe = hosts.mps_pipe_dir(p.device.gpu_uuid)
        if pipe is None:
            raise PrepareError(
                f"{ref}: device {p.device.name}: no MPS control daemon runs for GPU {p.device.gpu_uuid} "
                "(see the plugin's health and logs: mps.*)"
            )
        uuids = [d.uuid for d in limits.devices] if limits else []
        share = MpsShare(
            pipe_dir=pipe,
            ordinal=uuids.index(p.device.gpu_uuid) if p.device.gpu_uuid in uuids else 0,
            cores=p.consumed.get("cores", 0),
            memory=device_memory(ref, p)[1],
            shm_dir=hosts.mps_shm_dir,
            gpu_uuid=p.device.gpu_uuid,
            state_dir=hosts.mps_state_dir(p.device.gpu_uuid),
        )
        mps = mps_edits(share, hosts.mps_user_check)
        edits = mps if edits is None else edits.merged(mps)
        break  # one MPS GPU per claim (plan.py checks)
    return edits
