"""The exporter's plugin-level series: claims, registration, inventory, request and publish counters.

Pure: states are built by hand, the gRPC servicer gets a stand-in preparer, nothing touches files.
"""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import REGISTRY

from api.grpc import dra_v1_pb2, dra_v1beta1_pb2
from driver.metrics import GpuState, PluginMetrics, PluginState, claim_result
from driver.metrics.exporter import API_VERSIONS
from driver.plugin.claims.preparer import Prepared
from driver.plugin.service import DraV1, DraV1beta1
from driver.plugin.state.checkpoint import STATE_COMPLETED, STATE_STARTED, ClaimRecord, DeviceRecord


def claim(uid: str, state: str = STATE_COMPLETED, type_: str = "gpu") -> ClaimRecord:
    dev = DeviceRecord(
        ["r"], "node-a", "gpu-0", None, [f"k8s.gpu.carve.dev/claim={uid}-gpu-0"], type_, "GPU-0"
    )
    return ClaimRecord(uid, "ml", f"c-{uid}", state, [dev])


def metrics_for(**kw) -> PluginMetrics:
    state = PluginState(
        registered=kw.get("registered", True),
        claims=kw.get("claims", []),
        claims_dir=Path("/nonexistent"),
        gpus=kw.get("gpus", []),
    )
    return PluginMetrics(lambda: state)


def test_prepared_claims_counts_only_completed_ones():
    m = metrics_for(claims=[claim("a"), claim("b"), claim("c", STATE_STARTED)])
    assert m.registry.get_sample_value("carve_plugin_prepared_claims") == 2


def test_registered_is_one_only_when_the_kubelet_accepted():
    assert metrics_for(registered=True).registry.get_sample_value("carve_plugin_registered") == 1
    assert metrics_for(registered=False).registry.get_sample_value("carve_plugin_registered") == 0


def test_gpus_are_counted_by_strategy_and_model():
    a100, t4 = "NVIDIA A100-SXM4-80GB", "Tesla T4"
    gpus = [
        GpuState("GPU-a", 0, a100, "mig", 80 << 30),
        GpuState("GPU-b", 1, a100, "soft", 80 << 30),
        GpuState("GPU-c", 2, a100, "soft", 80 << 30),
        GpuState("GPU-d", 3, t4, "soft", 16 << 30),
    ]
    r = metrics_for(gpus=gpus).registry
    assert r.get_sample_value("carve_gpus", {"strategy": "soft", "model": a100}) == 2
    assert r.get_sample_value("carve_gpus", {"strategy": "mig", "model": a100}) == 1
    assert r.get_sample_value("carve_gpus", {"strategy": "soft", "model": t4}) == 1
    assert r.get_sample_value("carve_gpus", {"strategy": "mig", "model": t4}) is None
    info = {"gpu_uuid": "GPU-d", "index": "3", "model": t4, "strategy": "soft"}
    assert r.get_sample_value("carve_gpu_info", info) == 1
    assert r.get_sample_value("carve_gpu_memory_bytes", {"gpu_uuid": "GPU-d"}) == 16 << 30


def test_claim_result_tells_user_errors_from_internal_ones():
    assert claim_result("") == "ok"
    assert claim_result("claim ml/x (u): status.allocation: the claim is not allocated") == "error"
    assert claim_result("internal error: KeyError: 'x'") == "internal_error"


def test_requests_and_claim_outcomes_are_counted_by_api_version():
    m = metrics_for()
    m.observe_request("v1", "prepare", 0.02, ["", "", "claim ml/x (u): bad"])
    m.observe_request("v1beta1", "unprepare", 0.5, ["internal error: OSError: disk"])
    r = m.registry
    assert (
        r.get_sample_value("carve_plugin_requests_total", {"api_version": "v1", "operation": "prepare"}) == 1
    )
    ok = {"api_version": "v1", "operation": "prepare", "result": "ok"}
    bad = {**ok, "result": "error"}
    internal = {"api_version": "v1beta1", "operation": "unprepare", "result": "internal_error"}
    assert r.get_sample_value("carve_plugin_claim_operations_total", ok) == 2
    assert r.get_sample_value("carve_plugin_claim_operations_total", bad) == 1
    assert r.get_sample_value("carve_plugin_claim_operations_total", internal) == 1
    v1 = {"api_version": "v1", "operation": "prepare"}
    assert r.get_sample_value("carve_plugin_request_duration_seconds_count", v1) == 1
    assert r.get_sample_value("carve_plugin_request_duration_seconds_sum", v1) == 0.02
    assert r.get_sample_value("carve_plugin_request_duration_seconds_bucket", {**v1, "le": "0.01"}) == 0
    assert r.get_sample_value("carve_plugin_request_duration_seconds_bucket", {**v1, "le": "0.025"}) == 1


def test_event_series_exist_at_zero_before_the_first_event():
    # rate()/increase() need a sample before an event to see it, and a quiet plugin's panels show 0.
    r = metrics_for().registry
    for api_version in ("v1", "v1beta1"):
        for operation in ("prepare", "unprepare"):
            call = {"api_version": api_version, "operation": operation}
            assert r.get_sample_value("carve_plugin_requests_total", call) == 0
            inf = {**call, "le": "+Inf"}
            assert r.get_sample_value("carve_plugin_request_duration_seconds_bucket", inf) == 0
            for result in ("ok", "error", "internal_error"):
                labels = {**call, "result": result}
                assert r.get_sample_value("carve_plugin_claim_operations_total", labels) == 0
    for reason in ("xid", "gpu-lost", "ecc-pages-pending", "nvml-event-error", "other", "recovered"):
        assert r.get_sample_value("carve_gpu_health_events_total", {"reason": reason}) == 0


def test_the_zero_series_cover_every_api_version_the_plugin_serves():
    assert {DraV1.api_version, DraV1beta1.api_version} == set(API_VERSIONS)


def test_publish_gauges_follow_what_the_server_stored():
    m = metrics_for()
    stored = [
        {"spec": {"pool": {"name": "node-a", "generation": 3}, "devices": [{"name": "a"}, {"name": "b"}]}},
        {"spec": {"pool": {"name": "node-a", "generation": 3}, "devices": [{"name": "c"}]}},
    ]
    m.observe_publish("node-a", stored)
    r = m.registry
    assert r.get_sample_value("carve_plugin_published_slices", {"pool": "node-a"}) == 2
    assert r.get_sample_value("carve_plugin_published_devices", {"pool": "node-a"}) == 3
    assert r.get_sample_value("carve_plugin_pool_generation", {"pool": "node-a"}) == 3
    assert r.get_sample_value("carve_plugin_last_publish_error_timestamp_seconds") == 0


def test_a_failed_publish_is_counted_and_timestamped():
    m = metrics_for()
    before = time.time()
    m.observe_publish_failure()
    m.observe_publish_failure()
    r = m.registry
    assert r.get_sample_value("carve_plugin_publish_errors_total") == 2
    assert before <= r.get_sample_value("carve_plugin_last_publish_error_timestamp_seconds") <= time.time()


def test_each_plugin_has_its_own_registry_and_the_global_one_stays_clean():
    first, second = metrics_for(), metrics_for()
    first.observe_request("v1", "prepare", 0.1, [""])
    labels = {"api_version": "v1", "operation": "prepare"}
    assert first.registry.get_sample_value("carve_plugin_requests_total", labels) == 1
    assert second.registry.get_sample_value("carve_plugin_requests_total", labels) == 0
    assert not [m.name for m in REGISTRY.collect() if m.name.startswith("carve_")]


class StandInPreparer:
    def prepare(self, refs):
        return {r.uid: Prepared(error="" if r.name == "good" else f"claim {r.name}: bad") for r in refs}

    def unprepare(self, refs):
        return {r.uid: "" for r in refs}


def test_service_counts_kubelet_calls_by_api_version():
    m = metrics_for()
    claims = [dra_v1_pb2.Claim(namespace="ml", name=n, uid=n) for n in ("good", "bad")]
    DraV1(StandInPreparer(), m).NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=claims), None
    )
    beta = [dra_v1beta1_pb2.Claim(namespace="ml", name="good", uid="good")]
    DraV1beta1(StandInPreparer(), m).NodeUnprepareResources(
        dra_v1beta1_pb2.NodeUnprepareResourcesRequest(claims=beta), None
    )
    r = m.registry
    ok = {"api_version": "v1", "operation": "prepare", "result": "ok"}
    assert r.get_sample_value("carve_plugin_claim_operations_total", ok) == 1
    assert r.get_sample_value("carve_plugin_claim_operations_total", {**ok, "result": "error"}) == 1
    unprep = {"api_version": "v1beta1", "operation": "unprepare", "result": "ok"}
    assert r.get_sample_value("carve_plugin_claim_operations_total", unprep) == 1


def test_the_health_probes_empty_call_is_not_counted():
    m = metrics_for()
    DraV1(StandInPreparer(), m).NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(), None)
    labels = {"api_version": "v1", "operation": "prepare"}
    assert m.registry.get_sample_value("carve_plugin_requests_total", labels) == 0
    assert m.registry.get_sample_value("carve_plugin_request_duration_seconds_count", labels) == 0


def test_gpu_series_carry_the_node_they_are_on():
    # Issue 29: a GPU UUID alone does not say which node to look at; the dashboard filters by node.
    state = PluginState(
        registered=True, claims=[], claims_dir=Path("/nonexistent"),
        gpus=[GpuState("GPU-a", 0, "Tesla T4", "soft", 16 << 30)],
    )
    m = PluginMetrics(lambda: state, node="gpu-node-7")
    m.observe_health([], [("GPU-a", 0)], {})
    m.observe_fallback("GPU-a", 0, "mig", "soft")
    r = m.registry
    node = {"node": "gpu-node-7"}
    assert r.get_sample_value("carve_gpu_info", {**node, "gpu_uuid": "GPU-a", "index": "0",
                                                 "model": "Tesla T4", "strategy": "soft"}) == 1
    assert r.get_sample_value("carve_gpu_memory_bytes", {**node, "gpu_uuid": "GPU-a"}) == 16 << 30
    assert r.get_sample_value("carve_gpus", {**node, "strategy": "soft", "model": "Tesla T4"}) == 1
    assert r.get_sample_value("carve_gpu_healthy", {**node, "gpu_uuid": "GPU-a", "index": "0"}) == 1
    fallback = {**node, "gpu_uuid": "GPU-a", "index": "0", "wanted": "mig", "strategy": "soft"}
    assert r.get_sample_value("carve_plugin_gpu_strategy_fallback", fallback) == 1
    # Node-wide series stay as they are (the scrape target says which node).
    assert r.get_sample_value("carve_plugin_registered") == 1


def test_a_gate_the_api_server_has_off_is_a_series():
    m = metrics_for()
    m.observe_gates_off({"DRAConsumableCapacity"})
    r = m.registry
    assert r.get_sample_value("carve_plugin_feature_gate_off", {"gate": "DRAConsumableCapacity"}) == 1
    assert r.get_sample_value("carve_plugin_feature_gate_off", {"gate": "DRADeviceTaints"}) is None


def test_every_prepared_device_maps_its_pod_to_a_gpu_whatever_its_type():
    state = PluginState(
        registered=True, claims=[claim("a", type_="gpu"), claim("b", type_="mig"), claim("c", STATE_STARTED)],
        claims_dir=Path("/nonexistent"), pods=lambda record: [("ml", f"pod-{record.uid}")],
    )
    r = PluginMetrics(lambda: state, node="n1").registry
    for uid, type_ in (("a", "gpu"), ("b", "mig")):
        labels = {"claim_namespace": "ml", "claim_name": f"c-{uid}", "claim_uid": uid, "pod_namespace": "ml",
                  "pod": f"pod-{uid}", "device": "gpu-0", "gpu_uuid": "GPU-0", "type": type_, "node": "n1"}
        assert r.get_sample_value("carve_claim_device_info", labels) == 1
    infos = [s for f in r.collect() if f.name == "carve_claim_device_info" for s in f.samples]
    assert sorted(s.labels["claim_uid"] for s in infos) == ["a", "b"]  # not the claim still preparing
