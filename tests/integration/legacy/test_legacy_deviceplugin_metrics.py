"""The legacy device plugin's containers export their usage under the DRA claims' names and labels: the
allocation's region and limits files (as PreStartContainer writes them) and its owner file."""

from __future__ import annotations

from pathlib import Path

from driver.legacy.metrics import AllocationOwner, DevicePluginMetrics, read_owner, write_owner
from driver.limits import ClaimLimits, DeviceLimit, create_region, write_limits
from driver.limits.region import RegionStruct
from driver.plugin.container.edits import ClaimFiles

GIB = 1 << 30


def write_region(root: Path, uid: str, limits: list[tuple[int, int, str]], devices=()) -> None:
    """An allocation's plugin-written limits file and its region, with usage per device, as
    PreStartContainer and then the limiter leave them."""
    files = ClaimFiles(root / uid)
    files.region.parent.mkdir(parents=True)
    devices_limits = tuple(DeviceLimit(m, c, u) for m, c, u in limits)
    claim_limits = ClaimLimits(devices_limits, f"/var/run/carve/{uid}/region")
    create_region(files.region, claim_limits)
    write_limits(files.limits, claim_limits)
    region = RegionStruct.from_buffer_copy(files.region.read_bytes())
    for i, (used, peak, refusals, utilization) in enumerate(devices):
        d = region.devices[i]
        d.memory_used, d.memory_peak, d.oom_refusals, d.utilization = used, peak, refusals, utilization
    files.region.write_bytes(bytes(region))


def test_a_containers_usage_is_exported_with_its_pod(tmp_path: Path) -> None:
    root = tmp_path / "allocations"
    write_region(root, "legacy-abc", [(4 * GIB, 30, "GPU-1")], devices=[(3 * GIB, 3 * GIB, 2, 28)])
    write_owner(root / "legacy-abc", AllocationOwner("team", "infer-0", "server", (("GPU-1", 1),)))
    r = DevicePluginMetrics(root, "node-a").registry
    labels = {"claim_namespace": "team", "claim_name": "infer-0/server", "claim_uid": "legacy-abc",
              "pod_namespace": "team", "pod": "infer-0", "device": "gpu-1", "gpu_uuid": "GPU-1"}
    assert r.get_sample_value("carve_claim_memory_used_bytes", labels) == 3 * GIB
    assert r.get_sample_value("carve_claim_memory_limit_bytes", labels) == 4 * GIB
    assert r.get_sample_value("carve_claim_cores_limit_percent", labels) == 30
    assert r.get_sample_value("carve_claim_sm_utilization_percent", labels) == 28
    assert r.get_sample_value("carve_claim_oom_refusals_total", labels) == 2
    assert r.get_sample_value("carve_build_info", {"version": "0.1.0", "python": __import__(
        "platform").python_version(), "component": "device-plugin"}) == 1


def test_an_allocation_without_owner_or_region_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "allocations"
    write_region(root, "no-owner", [(GIB, 10, "GPU-0")])
    (root / "no-region").mkdir()
    write_owner(root / "no-region", AllocationOwner("team", "p", "c", (("GPU-0", 0),)))
    r = DevicePluginMetrics(root, "node-a").registry
    # One scrape: the allocation with an owner but no region counts once; the one without owner is not read.
    assert r.get_sample_value("carve_metrics_region_errors_total") == 1
    families = {m.name: m for m in r.collect()}
    assert families["carve_claim_memory_used_bytes"].samples == []


def test_an_owner_file_of_another_version_is_not_read(tmp_path: Path) -> None:
    write_owner(tmp_path, AllocationOwner("a", "b", "c", (("GPU-0", 0),)))
    assert read_owner(tmp_path) == AllocationOwner("a", "b", "c", (("GPU-0", 0),))
    (tmp_path / "owner.json").write_text('{"version": 2}')
    assert read_owner(tmp_path) is None
    (tmp_path / "owner.json").write_text("not json")
    assert read_owner(tmp_path) is None
