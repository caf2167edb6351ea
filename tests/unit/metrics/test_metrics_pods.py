"""Per-claim series name the consuming pod; carve_build_info; bounded mode-pending reasons."""

from __future__ import annotations

from pathlib import Path

from driver import __version__
from driver.metrics import PluginMetrics, PluginState
from driver.metrics.exporter import pending_reason
from driver.metrics.pods import ClaimPods
from driver.plugin.state.checkpoint import STATE_COMPLETED, ClaimRecord, DeviceRecord


def record(uid: str = "u1") -> ClaimRecord:
    dev = DeviceRecord(["r"], "n", "gpu-0", None, [f"k8s.gpu.carve.dev/claim={uid}-gpu-0"], "gpu", "GPU-0")
    return ClaimRecord(uid, "ml", "train", STATE_COMPLETED, [dev])


def claim_object(uid: str, *pods: str) -> dict:
    return {
        "metadata": {"namespace": "ml", "name": "train", "uid": uid},
        "status": {"reservedFor": [{"resource": "pods", "name": p, "uid": f"pod-{p}"} for p in pods]},
    }


def test_claim_pods_come_from_reserved_for_and_are_cached() -> None:
    calls = []
    now = [0.0]

    def get_claim(ns: str, name: str) -> dict:
        calls.append((ns, name))
        return claim_object("u1", "worker-1", "worker-0")

    pods = ClaimPods(get_claim, ttl_s=60, clock=lambda: now[0])
    assert pods.pods(record()) == [("ml", "worker-0"), ("ml", "worker-1")]
    assert pods.pods(record()) == [("ml", "worker-0"), ("ml", "worker-1")]
    assert len(calls) == 1  # one API call per claim per TTL, not per scrape
    now[0] = 61
    pods.pods(record())
    assert len(calls) == 2


def test_a_recreated_claim_of_the_same_name_is_not_ours() -> None:
    pods = ClaimPods(lambda ns, name: claim_object("other-uid", "p"))
    assert pods.pods(record()) == []


def test_an_api_error_leaves_the_labels_empty_and_the_scrape_whole() -> None:
    def fail(ns: str, name: str) -> dict:
        raise OSError("connection refused")

    assert ClaimPods(fail).pods(record()) == []


def test_pod_info_lists_every_consumer_of_a_shared_claim() -> None:
    consumers = [("ml", "worker-0"), ("ml", "worker-1")]
    state = PluginState(True, [record()], Path("/nonexistent"), pods=lambda r: consumers)
    r = PluginMetrics(lambda: state).registry
    base = {"claim_namespace": "ml", "claim_name": "train", "claim_uid": "u1"}
    for ns, pod in consumers:
        assert r.get_sample_value("carve_claim_pod_info", {**base, "pod_namespace": ns, "pod": pod}) == 1


def test_build_info_names_the_version() -> None:
    r = PluginMetrics(lambda: PluginState(True, [], Path("/nonexistent"))).registry
    samples = [s for m in r.collect() if m.name == "carve_build_info" for s in m.samples]
    assert len(samples) == 1
    assert samples[0].labels["version"] == __version__ and samples[0].labels["component"] == "plugin"


def test_pending_reasons_are_a_fixed_set() -> None:
    assert pending_reason("needs reset") == "needs_reset"
    assert pending_reason("waiting for 12 prepared claims") == "claims_prepared"
    foreign = "MIG instances carve did not create are on the GPU: 1/0, 2/0"
    assert pending_reason(foreign) == "foreign_mig_instances"
    assert pending_reason("anything else: nvml error 999") == "other"
