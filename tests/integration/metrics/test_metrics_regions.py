"""The exporter reads each limited claim's region file at scrape time: values, labels, bad files.

Region and limits files are real (driver.limits.create_region, write_limits), with usage written into the
region the way the limiter would, at the offsets of the mirrored C layout. Quotas and shares come from the
limits file, never from the region a container can write.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from driver.limits import ClaimLimits, DeviceLimit, create_region, write_limits
from driver.limits.region import RegionStruct
from driver.metrics import MetricsServer, PluginMetrics, PluginState
from driver.plugin.container.edits import ClaimFiles
from driver.plugin.state.checkpoint import STATE_COMPLETED, STATE_STARTED, ClaimRecord, DeviceRecord

GIB = 1 << 30


def device(name: str, type_: str, gpu: str) -> DeviceRecord:
    return DeviceRecord(["r"], "node-a", name, None, [f"k8s.gpu.carve.dev/claim=x-{name}"], type_, gpu)


def write_region(claims_dir: Path, uid: str, limits: list[tuple[int, int, str]], **usage) -> Path:
    """A claim's plugin-written limits file with `limits` [(memory, cores, uuid)] and its region, then usage
    per device and attached process ids in the region."""
    files = ClaimFiles(claims_dir / uid)
    path = files.region
    path.parent.mkdir(parents=True)
    devices = tuple(DeviceLimit(m, c, u) for m, c, u in limits)
    create_region(path, ClaimLimits(devices, f"/var/run/carve/{uid}/region"))
    write_limits(files.limits, ClaimLimits(devices, f"/var/run/carve/{uid}/region"))
    region = RegionStruct.from_buffer_copy(path.read_bytes())
    for i, (used, peak, refusals, utilization) in enumerate(usage.get("devices", [])):
        d = region.devices[i]
        d.memory_used, d.memory_peak, d.oom_refusals, d.utilization = used, peak, refusals, utilization
    for slot, pid in enumerate(usage.get("pids", [])):
        region.procs[slot].pid = pid
    path.write_bytes(bytes(region))
    return path


def labels(uid: str, name: str, device: str, gpu: str) -> dict:
    # No API server here: the consuming pod is unknown, so its labels are empty.
    return {"claim_namespace": "ml", "claim_name": name, "claim_uid": uid, "pod_namespace": "", "pod": "",
            "device": device, "gpu_uuid": gpu}


@pytest.fixture
def claims_dir(tmp_path: Path) -> Path:
    return tmp_path / "claims"


def metrics(claims_dir: Path, claims: list[ClaimRecord], still_prepared=lambda _uid: True) -> PluginMetrics:
    return PluginMetrics(lambda: PluginState(True, claims, claims_dir, still_prepared=still_prepared))


def test_soft_claim_usage_is_read_from_its_region(claims_dir):
    soft = ClaimRecord("u1", "ml", "train", STATE_COMPLETED, [device("gpu-1", "vgpu", "GPU-1")])
    write_region(
        claims_dir, "u1", [(4 * GIB, 30, "GPU-1")], devices=[(3 * GIB, 3 * GIB + 5, 2, 28)], pids=[11, 12]
    )
    r = metrics(claims_dir, [soft]).registry
    at = labels("u1", "train", "gpu-1", "GPU-1")
    assert r.get_sample_value("carve_claim_memory_limit_bytes", at) == 4 * GIB
    assert r.get_sample_value("carve_claim_memory_used_bytes", at) == 3 * GIB
    assert r.get_sample_value("carve_claim_memory_peak_bytes", at) == 3 * GIB + 5
    assert r.get_sample_value("carve_claim_oom_refusals_total", at) == 2
    assert r.get_sample_value("carve_claim_cores_limit_percent", at) == 30
    assert r.get_sample_value("carve_claim_sm_utilization_percent", at) == 28
    claim = {k: at[k] for k in ("claim_namespace", "claim_name", "claim_uid", "pod_namespace", "pod")}
    assert r.get_sample_value("carve_claim_processes", claim) == 2
    assert r.get_sample_value("carve_metrics_region_errors_total") == 0


def test_region_devices_are_matched_to_carve_devices_by_gpu_uuid(claims_dir):
    # Two GPUs, the second listed first in the record; two slots of one GPU share one region device.
    record = ClaimRecord(
        "u2",
        "ml",
        "multi",
        STATE_COMPLETED,
        [
            device("gpu-2-slot-0", "slot", "GPU-B"),
            device("gpu-1", "vgpu", "GPU-A"),
            device("gpu-2-slot-3", "slot", "GPU-B"),
        ],
    )
    write_region(
        claims_dir,
        "u2",
        [(2 * GIB, 20, "GPU-A"), (6 * GIB, 0, "GPU-B")],
        devices=[(GIB, GIB, 0, 10), (5 * GIB, 5 * GIB, 7, 55)],
    )
    r = metrics(claims_dir, [record]).registry
    a = labels("u2", "multi", "gpu-1", "GPU-A")
    b = labels("u2", "multi", "gpu-2-slot-0,gpu-2-slot-3", "GPU-B")
    assert r.get_sample_value("carve_claim_memory_limit_bytes", a) == 2 * GIB
    assert r.get_sample_value("carve_claim_memory_limit_bytes", b) == 6 * GIB
    assert r.get_sample_value("carve_claim_oom_refusals_total", b) == 7
    assert r.get_sample_value("carve_claim_cores_limit_percent", a) == 20
    assert r.get_sample_value("carve_claim_cores_limit_percent", b) == 0


def test_claims_without_the_limiter_or_not_yet_prepared_have_no_usage_series(claims_dir):
    whole = ClaimRecord("u3", "ml", "whole", STATE_COMPLETED, [device("gpu-0", "gpu", "GPU-0")])
    starting = ClaimRecord("u4", "ml", "starting", STATE_STARTED, [device("gpu-1", "vgpu", "GPU-1")])
    r = metrics(claims_dir, [whole, starting]).registry
    names = {s.name for m in r.collect() for s in m.samples}
    assert "carve_claim_memory_limit_bytes" not in names
    assert r.get_sample_value("carve_metrics_region_errors_total") == 0  # neither was even looked for


def test_a_corrupt_region_is_skipped_and_counted_while_others_are_served(claims_dir):
    good = ClaimRecord("ok", "ml", "good", STATE_COMPLETED, [device("gpu-1", "vgpu", "GPU-1")])
    bad = ClaimRecord("bad", "ml", "bad", STATE_COMPLETED, [device("gpu-1", "vgpu", "GPU-1")])
    write_region(claims_dir, "ok", [(GIB, 10, "GPU-1")])
    path = write_region(claims_dir, "bad", [(GIB, 10, "GPU-1")])
    path.write_bytes(b"\0" * len(path.read_bytes()))  # right size, wrong magic
    m = metrics(claims_dir, [good, bad])
    server = MetricsServer("127.0.0.1:0", m.registry)
    server.start()
    try:
        for _ in range(2):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as resp:
                assert resp.status == 200
                text = resp.read().decode()
    finally:
        server.stop()
    samples = {
        (s.name, s.labels.get("claim_uid")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("carve_claim_memory_limit_bytes", "ok")] == GIB
    assert ("carve_claim_memory_limit_bytes", "bad") not in samples
    assert samples[("carve_metrics_region_errors_total", None)] == 2  # one per scrape


def test_a_missing_region_counts_unless_the_claim_was_just_unprepared(claims_dir):
    gone = ClaimRecord("gone", "ml", "gone", STATE_COMPLETED, [device("gpu-1", "vgpu", "GPU-1")])
    assert metrics(claims_dir, [gone]).registry.get_sample_value("carve_metrics_region_errors_total") == 1
    unprepared = metrics(claims_dir, [gone], still_prepared=lambda _uid: False)
    assert unprepared.registry.get_sample_value("carve_metrics_region_errors_total") == 0


def test_a_bad_region_is_logged_once_not_at_every_scrape(claims_dir, caplog):
    gone = ClaimRecord("gone", "ml", "gone", STATE_COMPLETED, [device("gpu-1", "vgpu", "GPU-1")])
    r = metrics(claims_dir, [gone]).registry
    for _ in range(3):
        r.get_sample_value("carve_metrics_region_errors_total")
    assert r.get_sample_value("carve_metrics_region_errors_total") == 4
    assert sum("metrics.region-unreadable" in rec.getMessage() for rec in caplog.records) == 1


def test_the_quota_shown_is_the_plugins_not_what_the_container_wrote_into_its_region(claims_dir):
    soft = ClaimRecord("u1", "ml", "train", STATE_COMPLETED, [device("gpu-1", "vgpu", "GPU-1")])
    path = write_region(claims_dir, "u1", [(4 * GIB, 30, "GPU-1")])
    region = RegionStruct.from_buffer_copy(path.read_bytes())
    region.devices[0].memory_limit, region.devices[0].cores_limit = 0, 0  # the tenant's edit
    path.write_bytes(bytes(region))
    r = metrics(claims_dir, [soft]).registry
    at = labels("u1", "train", "gpu-1", "GPU-1")
    assert r.get_sample_value("carve_claim_memory_limit_bytes", at) == 4 * GIB
    assert r.get_sample_value("carve_claim_cores_limit_percent", at) == 30


def test_the_nvml_cross_check_is_exported(claims_dir):
    from driver.plugin.enforcement.crosscheck import Findings, OverQuota, OverShare, Unenforced

    soft = ClaimRecord("u1", "ml", "train", STATE_COMPLETED, [device("gpu-1", "vgpu", "GPU-1")])
    findings = Findings(
        unenforced=[Unenforced("GPU-1", 77, GIB, "u1"), Unenforced("GPU-1", 78, GIB, None)],
        over_quota=[OverQuota("u1", "GPU-1", 5 * GIB, 4 * GIB, (12,))],
        over_share=[OverShare("u1", "GPU-1", 72, 30, "force", (12,))],
        soft_gpus=("GPU-1", "GPU-2"),
        kills=3,
        unattributed=["u1"],
    )
    r = PluginMetrics(lambda: PluginState(True, [soft], claims_dir, findings=findings)).registry
    assert r.get_sample_value("carve_unenforced_processes", {"gpu_uuid": "GPU-1"}) == 2
    assert r.get_sample_value("carve_unenforced_processes", {"gpu_uuid": "GPU-2"}) == 0
    over = {"claim_namespace": "ml", "claim_name": "train", "claim_uid": "u1", "pod_namespace": "", "pod": "",
            "gpu_uuid": "GPU-1"}
    assert r.get_sample_value("carve_claim_memory_over_quota_bytes", over) == GIB
    assert r.get_sample_value("carve_claim_sm_over_share_percent", over) == 72 - 30
    assert r.get_sample_value("carve_claim_sm_over_share_percent", {**over, "gpu_uuid": "GPU-2"}) is None
    assert r.get_sample_value("carve_enforcement_kills_total") == 3
    claim = {"claim_namespace": "ml", "claim_name": "train", "claim_uid": "u1"}
    assert r.get_sample_value("carve_claim_unattributed", claim) == 1
