"""The plugin process with --metrics-addr: a fake kubelet prepares claims, Prometheus's side scrapes them."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.plugin_harness import (
    REPO,
    Kubelet,
    PluginProcess,
    result,
    slice_config,
)

from driver.plugin.container.edits import ClaimFiles

GIB = 1 << 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def plugin(node):
    port = free_port()
    process = PluginProcess(node, "0=mig,1=soft,exclusive", extra=("--metrics-addr", f"127.0.0.1:{port}"))
    process.start()
    process.wait_for_log(rf"event=plugin.started .*metrics={port}")
    process.port = port
    yield process
    process.stop()


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels) -> float | None:
    """The value of the one sample of `name` whose labels include `labels` (None if there is none)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return found[0] if found else None


def soft_claim(node, name: str = "soft"):
    return node.put_claim(
        name,
        [result("slice", "gpu-1", share_id=str(uuid.uuid4()), consumed={"memory": "4Gi", "cores": "30"})],
        [slice_config(corePolicy="force")],
        namespace="ml",
    )


def test_prepared_soft_claim_is_scraped_with_its_quota(node, plugin):
    kubelet = Kubelet(node)
    before = scrape(plugin.port)
    assert value(before, "carve_plugin_prepared_claims") == 0
    assert value(before, "carve_plugin_published_devices", pool=node.node_name) > 0
    assert value(before, "carve_gpus", strategy="soft") == 1

    claim = soft_claim(node)
    assert kubelet.prepare([claim])[claim[2]]["error"] == ""
    after = scrape(plugin.port)
    assert value(after, "carve_plugin_prepared_claims") == 1
    at = {"claim_namespace": "ml", "claim_name": "soft", "claim_uid": claim[2], "device": "gpu-1"}
    assert value(after, "carve_claim_memory_limit_bytes", **at) == 4 * GIB
    assert value(after, "carve_claim_cores_limit_percent", **at) == 30
    assert value(after, "carve_claim_memory_used_bytes", **at) == 0
    ok = {"api_version": "v1", "operation": "prepare", "result": "ok"}
    assert value(after, "carve_plugin_claim_operations_total", **ok) == 1

    assert kubelet.unprepare([claim]) == {claim[2]: ""}
    gone = scrape(plugin.port)
    assert value(gone, "carve_plugin_prepared_claims") == 0
    assert value(gone, "carve_claim_memory_limit_bytes", claim_uid=claim[2]) is None
    assert value(gone, "carve_metrics_region_errors_total") == 0


def test_a_corrupt_region_does_not_break_the_scrape(node, plugin):
    kubelet = Kubelet(node)
    good, bad = soft_claim(node, "good"), soft_claim(node, "bad")
    out = kubelet.prepare([good, bad])
    assert [r["error"] for r in out.values()] == ["", ""]
    ClaimFiles(node.plugin_dir / "claims" / bad[2]).region.write_bytes(b"not a region")

    samples = scrape(plugin.port)
    assert value(samples, "carve_plugin_prepared_claims") == 2
    assert value(samples, "carve_claim_memory_limit_bytes", claim_uid=good[2]) == 4 * GIB
    assert value(samples, "carve_claim_memory_limit_bytes", claim_uid=bad[2]) is None
    assert value(samples, "carve_metrics_region_errors_total") == 1
    assert "event=metrics.region-unreadable" in plugin.log()


def test_metrics_address_comes_from_the_env_twin(node):
    port = free_port()
    process = PluginProcess(node, "1=soft,exclusive", env={"CARVE_METRICS_ADDR": f"127.0.0.1:{port}"})
    process.start()
    try:
        process.wait_for_log(rf"event=plugin.started .*metrics={port}")
        assert value(scrape(port), "carve_plugin_registered") == 0  # the fake kubelet has not answered yet
        Kubelet(node).notify(True)
        assert value(scrape(port), "carve_plugin_registered") == 1
    finally:
        process.stop()


def test_a_bad_metrics_address_is_a_one_line_usage_error(node):
    out = subprocess.run(
        [sys.executable, "-m", "driver.cli", "plugin", *node.args("exclusive"), "--metrics-addr", "8080"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "--metrics-addr '8080': expected [host]:port" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
