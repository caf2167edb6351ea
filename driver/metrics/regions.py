"""What a soft-slice or slot claim uses, read from its shared region at scrape time.

The limiter keeps the usage in the claim's region file (driver/limits/region.py; where the driver enforces
the memory, NVML's count for the claim's recorded cgroups replaces it: driver/plugin/enforcement/
driverusage.py); reading it is a mapping
and a few loads, so the exporter reads it on each scrape instead of caching anything. The quota and the
share come from the plugin's limits file (driver/limits/limitsfile.py), which the container cannot write;
it numbers the devices as the region does and names each by GPU UUID; this module puts the carve device
names of the claim's checkpoint record next to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from driver import names
from driver.limits import Region, read_limits
from driver.plugin.claims.dirs import ClaimDirs, as_dirs
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.enforcement.driverusage import driver_usage
from driver.plugin.state.checkpoint import ClaimRecord

LIMITED_TYPES = (names.TYPE_VGPU, names.TYPE_SLOT, names.TYPE_MPS)


@dataclass(frozen=True)
class DeviceUsage:
    device: str  # carve device name(s) on this GPU, comma-separated when a claim holds several slots
    gpu_uuid: str
    memory_used_bytes: int
    memory_limit_bytes: int  # 0 = no memory limit
    memory_peak_bytes: int
    oom_refusals: int
    cores_limit_percent: int  # 0 = no compute limit
    sm_utilization_percent: int  # the claim's share of SM time the limiter measured at its last tick


@dataclass(frozen=True)
class ClaimUsage:
    processes: int  # processes attached to the region (a dead one counts until the limiter reclaims it)
    devices: tuple[DeviceUsage, ...]


def is_limited(record: ClaimRecord) -> bool:
    """Whether the claim runs under the limiter, i.e. has a region file."""
    return any(d.type in LIMITED_TYPES and not d.admin for d in record.devices)  # admin: no region


def region_path(claims_dir: Path | ClaimDirs, uid: str) -> Path:
    return ClaimFiles(as_dirs(claims_dir) / uid).region


def _device_names(record: ClaimRecord) -> dict[str, str]:
    """GPU UUID -> the claim's limited carve devices on it (slots of one GPU share one region device)."""
    by_gpu: dict[str, set[str]] = {}
    for d in record.devices:
        if d.type in LIMITED_TYPES:
            by_gpu.setdefault(d.gpu_uuid, set()).add(d.device)
    return {uuid: ",".join(sorted(devices)) for uuid, devices in by_gpu.items()}


def read_claim_usage(record: ClaimRecord, path: Path) -> ClaimUsage:
    """The claim's usage per device; raises RegionError for a missing, foreign or corrupt region or limits
    file. `path` is the region file, <claims>/<uid>/region/region."""
    names_by_gpu = _device_names(record)
    claim_dir = Path(path).parent.parent
    limits = read_limits(ClaimFiles(claim_dir).limits)
    # Where the driver enforces, its count (every process of the containers' cgroups) is what is used.
    by_driver = driver_usage(claim_dir, limits.uuids)
    with Region.open(path) as region:
        devices = []
        for i in range(min(region.device_count, len(limits.uuids))):
            uuid = limits.uuids[i]
            devices.append(
                DeviceUsage(
                    device=names_by_gpu.get(uuid, ""),
                    gpu_uuid=uuid,
                    memory_used_bytes=by_driver.get(uuid, region.used_bytes(i)),
                    memory_limit_bytes=limits.memory_limits[i],
                    memory_peak_bytes=region.peak_bytes(i),
                    oom_refusals=region.oom_refusals(i),
                    cores_limit_percent=limits.cores_limits[i],
                    sm_utilization_percent=region.utilization(i),
                )
            )
        return ClaimUsage(processes=len(region.processes()), devices=tuple(devices))
